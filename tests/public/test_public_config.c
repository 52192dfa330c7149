/* test_public_config.c — a program's own sections of the config file
 * (porteiro_config.h, porteiro_config_parse_with), as an outside program
 * sees them: built against include/ alone, linked with libporteiro.so. A
 * section of its own with the stock handlers and one of its own, a
 * policy's field read in a shared walk, and the errors: each exactly
 * "FILE:LINE: PATH: message", the library's sections checked first, the
 * library's contract on unknown names kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "porteiro_config.h"

#define MAX_HOSTS 4

typedef struct app {
    int64_t port;
    char *name;
    bool verbose;
    int64_t timeout_ms;
    char *hosts[MAX_HOSTS];
    size_t nhosts;
    int64_t deny_status; /* of the policy "api" */
    bool app_seen;
} app;

static void app_free(app *a) {
    free(a->name);
    for (size_t i = 0; i < a->nhosts; i++)
        free(a->hosts[i]);
    memset(a, 0, sizeof(*a));
}

/* A custom handler: a list of host names, none with a ':'. */
static porteiro_status app_hosts(porteiro_config_reader *r, const porteiro_config_value *v,
                                 const char *path, const porteiro_config_field *f, void *target) {
    app *a = target;
    size_t n;
    (void)f;
    if (porteiro_config_value_kind(v, &n) != PORTEIRO_CONFIG_SEQUENCE)
        return porteiro_config_fail(r, v, path, "expected a list of host names");
    if (n > MAX_HOSTS)
        return porteiro_config_fail(r, v, path, "more than %d hosts", MAX_HOSTS);
    for (size_t i = 0; i < n; i++) {
        char sub[PORTEIRO_CONFIG_PATH_MAX];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        const porteiro_config_value *item = porteiro_config_value_at(r, v, i, NULL);
        const char *s = porteiro_config_scalar(r, item, sub, "a host name");
        if (s == NULL)
            return PORTEIRO_ERR_CONFIG;
        if (strchr(s, ':') != NULL)
            return porteiro_config_fail(r, item, sub, "no port here, got '%s'", s);
        if ((a->hosts[a->nhosts] = strdup(s)) == NULL)
            return porteiro_config_fail(r, item, sub, "out of memory");
        a->nhosts++;
    }
    return PORTEIRO_OK;
}

static porteiro_status app_section(porteiro_config_reader *r, const porteiro_config_value *v,
                                   const char *path, const porteiro_config_field *f, void *target) {
    static const porteiro_config_field fields[] = {
        {"port", porteiro_config_set_int, true, offsetof(app, port), 1, 65535},
        {"name", porteiro_config_set_string, false, offsetof(app, name), 0, 16},
        {"verbose", porteiro_config_set_bool, false, offsetof(app, verbose), 0, 0},
        {"timeout", porteiro_config_set_duration, false, offsetof(app, timeout_ms), 1000, 60000},
        {"hosts", app_hosts, false, 0, 0, 0},
    };
    (void)f;
    ((app *)target)->app_seen = true;
    return porteiro_config_walk(r, v, path, fields, sizeof(fields) / sizeof(fields[0]), 0, target);
}

/* The policies mapping is the library's: a shared walk of each policy
 * reads deny_status (a name the library leaves to porteirod) of "api". */
static porteiro_status app_policies(porteiro_config_reader *r, const porteiro_config_value *v,
                                    const char *path, const porteiro_config_field *f,
                                    void *target) {
    static const porteiro_config_field fields[] = {
        {"deny_status", porteiro_config_set_int, false, offsetof(app, deny_status), 400, 599},
    };
    size_t n;
    (void)f;
    porteiro_config_value_kind(v, &n);
    for (size_t i = 0; i < n; i++) {
        const porteiro_config_value *k, *pol = porteiro_config_value_at(r, v, i, &k);
        const char *name = porteiro_config_scalar(r, k, path, "a policy name");
        if (name == NULL)
            return PORTEIRO_ERR_CONFIG;
        char sub[PORTEIRO_CONFIG_PATH_MAX];
        snprintf(sub, sizeof(sub), "%s.%s", path, name);
        if (strcmp(name, "api") == 0 &&
            porteiro_config_walk(r, pol, sub, fields, 1, PORTEIRO_CONFIG_SHARED, target) !=
                PORTEIRO_OK)
            return PORTEIRO_ERR_CONFIG;
    }
    return PORTEIRO_OK;
}

static const porteiro_config_field top[] = {
    {"myapp", app_section, false, 0, 0, 0},
    {"policies", app_policies, false, 0, 0, 0},
};

/* Parses text with the app's fields; NULL (and err) or the config. */
static porteiro_config *parse(const char *text, app *a, char *err, size_t errlen) {
    memset(a, 0, sizeof(*a));
    err[0] = '\0';
    return porteiro_config_parse_with(text, strlen(text), "t.yaml", top, 2, a, err, errlen);
}

static void reads_own_section(void **state) {
    (void)state;
    const char *text = "prefix: shop\n"
                       "myapp:\n"
                       "  port: 8443\n"
                       "  name: front\n"
                       "  verbose: true\n"
                       "  timeout: 30s\n"
                       "  hosts: [a.example, b.example]\n"
                       "policies:\n"
                       "  api:\n"
                       "    limits: [fixed_window 10/1s]\n"
                       "    deny_status: 429\n";
    app a;
    char err[300];
    porteiro_config *cfg = parse(text, &a, err, sizeof(err));
    if (cfg == NULL)
        fail_msg("%s", err);
    assert_true(a.app_seen);
    assert_int_equal(a.port, 8443);
    assert_string_equal(a.name, "front");
    assert_true(a.verbose);
    assert_int_equal(a.timeout_ms, 30000);
    assert_int_equal(a.nhosts, 2);
    assert_string_equal(a.hosts[1], "b.example");
    assert_int_equal(a.deny_status, 429);
    /* and the library's own reading of the same file */
    assert_string_equal(porteiro_config_options(cfg)->prefix, "shop");
    assert_non_null(porteiro_config_policy(cfg, "api"));
    porteiro_config_free(cfg);
    app_free(&a);

    /* Without the section: nothing called, the library's config all the same. */
    cfg = parse("prefix: shop\n", &a, err, sizeof(err));
    assert_non_null(cfg);
    assert_false(a.app_seen);
    porteiro_config_free(cfg);
}

static void errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *error;
    } bad[] = {
        /* the three of the brief: out of range, unknown, missing */
        {"myapp:\n  port: 70000\n", "t.yaml:2: myapp.port: must be between 1 and 65535"},
        {"myapp:\n  port: 80\n  colour: red\n", "t.yaml:3: myapp.colour: unknown field"},
        {"prefix: p\nmyapp:\n  name: x\n", "t.yaml:3: myapp: missing field 'port'"},
        /* each stock handler's own */
        {"myapp:\n  port: 8x\n", "t.yaml:2: myapp.port: expected an integer, got '8x'"},
        {"myapp:\n  port: ~\n", "t.yaml:2: myapp.port: expected an integer, got null"},
        {"myapp:\n  port: [1]\n", "t.yaml:2: myapp.port: expected an integer"},
        {"myapp:\n  port: 1\n  name: abcdefghijklmnopq\n",
         "t.yaml:3: myapp.name: longer than 16 bytes"},
        {"myapp:\n  port: 1\n  name: ''\n", "t.yaml:3: myapp.name: must not be empty"},
        {"myapp:\n  port: 1\n  verbose: yes\n",
         "t.yaml:3: myapp.verbose: expected true or false, got 'yes'"},
        {"myapp:\n  port: 1\n  timeout: 2m\n",
         "t.yaml:3: myapp.timeout: must be between 1000ms and 60000ms, got '2m'"},
        {"myapp:\n  port: 1\n  timeout: soon\n",
         "t.yaml:3: myapp.timeout: expected a duration such as 250ms, 1s, 1m, 1h, 1d, got 'soon'"},
        /* the walk's */
        {"myapp:\n  port: 1\n  port: 2\n", "t.yaml:3: myapp.port: given twice"},
        {"myapp: 5\n", "t.yaml:1: myapp: expected a mapping"},
        {"myapp:\n  port: 1\nmyapp:\n  port: 2\n", "t.yaml:3: myapp: given twice"},
        /* a custom handler's */
        {"myapp:\n  port: 1\n  hosts:\n    - a.example\n    - b.example:80\n",
         "t.yaml:5: myapp.hosts[1]: no port here, got 'b.example:80'"},
        {"myapp:\n  port: 1\n  hosts: a\n", "t.yaml:3: myapp.hosts: expected a list of host names"},
        /* a policy's field, in a shared walk */
        {"policies:\n  api:\n    limits: [fixed_window 1/1s]\n    deny_status: 200\n",
         "t.yaml:4: policies.api.deny_status: must be between 400 and 599"},
        /* a name neither knows is still the library's error */
        {"myapp:\n  port: 1\nother: 1\n", "t.yaml:3: other: unknown field"},
        /* the library's sections are checked first, whatever the order */
        {"myapp:\n  port: 0\nprefix: ''\n", "t.yaml:3: prefix: must not be empty"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        app a;
        char err[300];
        porteiro_config *cfg = parse(bad[i].text, &a, err, sizeof(err));
        if (cfg != NULL || strcmp(err, bad[i].error) != 0)
            fail_msg("case %zu: got '%s'\n  want '%s'", i, cfg ? "(accepted)" : err, bad[i].error);
        app_free(&a);
    }
}

/* porteiro_config_parse keeps its contract: porteirod's names are skipped,
 * a caller's are unknown to it. */
static void library_contract(void **state) {
    (void)state;
    char err[300];
    const char *own = "myapp:\n  port: 1\n";
    assert_null(porteiro_config_parse(own, strlen(own), "t.yaml", err, sizeof(err)));
    assert_string_equal(err, "t.yaml:1: myapp: unknown field");
    const char *daemon = "listen: 127.0.0.1:8080\nspoe: {listen: 127.0.0.1:9000}\n";
    porteiro_config *cfg =
        porteiro_config_parse(daemon, strlen(daemon), "t.yaml", err, sizeof(err));
    assert_non_null(cfg);
    porteiro_config_free(cfg);
    /* a table larger than the walker's bound is refused, not overrun */
    porteiro_config_field many[PORTEIRO_CONFIG_MAX_FIELDS + 1];
    for (size_t i = 0; i < sizeof(many) / sizeof(many[0]); i++)
        many[i] = (porteiro_config_field){i == 0 ? "myapp" : "x", NULL, false, 0, 0, 0};
    app a = {0};
    assert_null(porteiro_config_parse_with(own, strlen(own), "t.yaml", many,
                                           sizeof(many) / sizeof(many[0]), &a, err, sizeof(err)));
    assert_string_equal(err, "t.yaml:1: config: a table of more than 64 fields");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_own_section),
        cmocka_unit_test(errors),
        cmocka_unit_test(library_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
