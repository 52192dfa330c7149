/* test_envoy_config.c — envoy ratelimit's config as porteiro reads it
 * (daemon/rules): the README's examples as a folder, which rule each request
 * descriptor reaches, counter keys, and every kind of config error with its
 * FILE:LINE: PATH. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules/envoy.h"

static pe_config *examples(void) {
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/tests/envoy/examples", getenv("PORTEIRO_SOURCE_DIR"));
    pe_config *cfg = pe_config_load(dir, true, err, sizeof(err));
    if (cfg == NULL)
        print_error("%s\n", err);
    assert_non_null(cfg);
    return cfg;
}

/* Entries as "k=v,k2=v2" (test data only). */
static size_t entries(const char *spec, pe_entry *out, char *buf) {
    strcpy(buf, spec);
    size_t n = 0;
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        out[n++] = (pe_entry){kv, strlen(kv), eq + 1, strlen(eq + 1)};
    }
    return n;
}

/* The metric path of the rule spec reaches in domain, or "-" for none. */
static const char *reach(const pe_config *cfg, const char *domain, const char *spec) {
    static char buf[512];
    pe_entry e[8];
    const pe_rule *path[8];
    size_t n = entries(spec, e, buf);
    const pe_domain *d = pe_domain_find(cfg, domain, strlen(domain));
    assert_non_null(d);
    const pe_rule *r = pe_match(d, e, n, path);
    return r != NULL ? r->path : "-";
}

static void test_examples_match(void **s) {
    (void)s;
    pe_config *cfg = examples();
    assert_int_equal(cfg->ndomains, 11);
    /* 1 */
    assert_string_equal(reach(cfg, "mongo_cps", "database=users"), "mongo_cps.database_users");
    assert_string_equal(reach(cfg, "mongo_cps", "database=other"), "-");
    /* 2: nested; the key alone takes any value */
    assert_string_equal(reach(cfg, "messaging", "message_type=marketing,to_number=2061111111"),
                        "messaging.message_type_marketing.to_number");
    assert_string_equal(reach(cfg, "messaging", "to_number=2061111111"), "messaging.to_number");
    assert_string_equal(reach(cfg, "messaging", "message_type=marketing"), "-");
    assert_string_equal(reach(cfg, "messaging", "message_type=other,to_number=1"), "-");
    /* 3: key + value first */
    assert_string_equal(reach(cfg, "edge_proxy_per_ip", "remote_address=50.0.0.5"),
                        "edge_proxy_per_ip.remote_address_50.0.0.5");
    assert_string_equal(reach(cfg, "edge_proxy_per_ip", "remote_address=50.0.0.1"),
                        "edge_proxy_per_ip.remote_address");
    /* 4: depth must match */
    assert_string_equal(reach(cfg, "example4", "key=value,subkey=subvalue"), "-");
    assert_string_equal(reach(cfg, "example4", "key=value2,subkey=subvalue"),
                        "example4.key_value2.subkey");
    assert_string_equal(reach(cfg, "example4", "key=value2"), "-");
    /* 5 */
    const pe_domain *d5 = pe_domain_find(cfg, "internal", 8);
    assert_true(d5->children[0].unlimited);
    assert_string_equal(reach(cfg, "internal", "ldap=x"), "internal.ldap");
    /* 6 */
    assert_string_equal(reach(cfg, "example6", "service=auth-service,user=user-a"),
                        "example6.service.user_user-a");
    /* 9: wildcard */
    assert_string_equal(reach(cfg, "example9", "key1=value_1"), "example9.key1_value*");
    assert_string_equal(reach(cfg, "example9", "key1=valu"), "-");
    /* 11 */
    assert_string_equal(reach(cfg, "example11", "files=files/a.pdf"), "example11.files_files/*");
    pe_config_free(cfg);
}

static size_t key_of(const pe_config *cfg, const char *domain, const char *spec, char *out) {
    char buf[512];
    pe_entry e[8];
    const pe_rule *path[8];
    size_t n = entries(spec, e, buf);
    const pe_domain *d = pe_domain_find(cfg, domain, strlen(domain));
    assert_non_null(pe_match(d, e, n, path));
    return pe_counter_key(e, n, path, out, 256);
}

static void test_counter_keys(void **s) {
    (void)s;
    pe_config *cfg = examples();
    char a[256], b[256];
    /* A wildcard: each value its own counter (example 9) ... */
    size_t na = key_of(cfg, "example9", "key1=value_1", a);
    size_t nb = key_of(cfg, "example9", "key1=value_2", b);
    assert_true(na > 0 && nb > 0);
    assert_false(na == nb && memcmp(a, b, na) == 0);
    /* ... unless share_threshold (example 11): one counter. */
    na = key_of(cfg, "example11", "files=files/a.pdf", a);
    nb = key_of(cfg, "example11", "files=files/b.csv", b);
    assert_true(na == nb && memcmp(a, b, na) == 0);
    assert_int_equal(na, strlen("5:files7:files/*"));
    assert_memory_equal(a, "5:files7:files/*", na);
    na = key_of(cfg, "example11", "path=api/a", a);
    nb = key_of(cfg, "example11", "path=api/b", b);
    assert_false(na == nb && memcmp(a, b, na) == 0);
    /* Too small a buffer: 0. */
    pe_entry e = {"k", 1, "v", 1};
    const pe_rule *path[1] = {&cfg->domains[0].children[0]};
    char small[4];
    assert_int_equal(pe_counter_key(&e, 1, path, small, sizeof(small)), 0);
    pe_config_free(cfg);
}

/* Each bad text gives this message, with its line. */
static void expect_error(const char *text, const char *want) {
    char err[512] = "";
    pe_config *cfg = pe_config_new();
    int rc = pe_config_add_text(cfg, text, strlen(text), "t.yaml", err, sizeof(err));
    if (rc == 0 || strstr(err, want) == NULL)
        print_error("error: '%s', want '%s'\n", err, want);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, want));
    pe_config_free(cfg);
}

static void test_errors(void **s) {
    (void)s;
    expect_error("descriptors: []\n", "t.yaml:1: domain: missing");
    expect_error("domain: \"\"\n", "t.yaml:1: domain: the domain is empty");
    expect_error("domain: a\nfoo: 1\n", "t.yaml:2: foo: unknown field");
    expect_error("domain: a\ndescriptors:\n  - value: x\n",
                 "t.yaml:3: descriptors[0]: a descriptor needs a non-empty key");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: sec\n      requests_per_unit: 1\n",
        "t.yaml:5: descriptors[0].rate_limit.unit: unknown unit 'sec'");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
        "t.yaml:5: descriptors[0].rate_limit: a rate_limit needs a unit");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
        "descriptors[0].rate_limit: an unlimited rate_limit takes no unit");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
        "t.yaml:6: descriptors[0].rate_limit.requests_per_unit: expected an integer");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4000000000\n",
        "t.yaml:5: descriptors[0].rate_limit: requests_per_unit above 1000000000");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967296\n",
        "requests_per_unit: expected an integer from 0 to 4294967295");
    expect_error("domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
                 "t.yaml:5: descriptors[1]: duplicate descriptor 'a.k_v' (also at line 3)");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: x\n      - key: x\n",
        "t.yaml:6: descriptors[0].descriptors[1]: duplicate descriptor 'a.k.x'");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      replaces:\n        - name: n\n",
        "cannot replace its own name 'n'");
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      replaces:\n        - name: \"\"\n",
        "t.yaml:7: descriptors[0].rate_limit.replaces[0].name: a replaces entry needs a name");
    /* the name read before the bad field is freed (ASan's leak check fails this otherwise) */
    expect_error(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      replaces:\n        - name: x\n          unit: second\n",
        "t.yaml:8: descriptors[0].rate_limit.replaces[0].unit: unknown field (replaces entries have: name)");
    expect_error("domain: a\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n",
                 "t.yaml:4: descriptors[0].shadow_mode: expected true or false");
    expect_error("domain: a\ndescriptors:\n  - key: k\n    share_threshold: true\n",
                 "share_threshold needs a wildcard value");
    expect_error("domain: a\ndomain: b\n", "t.yaml:2: config: 'domain' is given twice");
    expect_error("domain: [a\n", "t.yaml:");
    expect_error("", "t.yaml:1: config: the file is empty");
    expect_error("- a\n", "t.yaml:1: config: expected a mapping");
    expect_error("domain: a\ndescriptors: 5\n",
                 "t.yaml:2: descriptors: expected a list of descriptors");
    /* Nested too deep. */
    char deep[4096] = "domain: a\ndescriptors:\n";
    for (int i = 0; i < PE_MAX_DEPTH + 1; i++) {
        char line[256];
        snprintf(line, sizeof(line), "%*s- key: k\n%*s  descriptors:\n", 2 + 4 * i, "", 2 + 4 * i,
                 "");
        strcat(deep, line);
    }
    expect_error(deep, "nested more than 16 deep");
}

static void test_duplicate_domain_across_files(void **s) {
    (void)s;
    char err[512] = "";
    pe_config *cfg = pe_config_new();
    const char *a = "domain: x\n";
    assert_int_equal(pe_config_add_text(cfg, a, strlen(a), "a.yaml", err, sizeof(err)), 0);
    assert_int_equal(pe_config_add_text(cfg, a, strlen(a), "b.yaml", err, sizeof(err)), -1);
    assert_string_equal(err, "b.yaml:1: domain: duplicate domain 'x' (also in a.yaml)");
    pe_config_free(cfg);
    assert_null(pe_config_load("/nonexistent/porteiro", false, err, sizeof(err)));
    assert_non_null(strstr(err, "/nonexistent/porteiro:1: config: no such file or folder"));
}

static void test_units(void **s) {
    (void)s;
    assert_int_equal(pe_unit_seconds(PE_SECOND), 1);
    assert_int_equal(pe_unit_seconds(PE_WEEK), 604800);
    assert_int_equal(pe_unit_seconds(PE_MONTH), 2592000);
    assert_int_equal(pe_unit_seconds(PE_YEAR), 31536000);
    assert_int_equal(pe_unit_seconds((pe_unit)9), 0);
    assert_string_equal(pe_unit_name(PE_HOUR), "hour");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples_match), cmocka_unit_test(test_counter_keys),
        cmocka_unit_test(test_errors),         cmocka_unit_test(test_duplicate_domain_across_files),
        cmocka_unit_test(test_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
