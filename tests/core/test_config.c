/* test_config.c — the YAML configuration file: the issue's exact shape,
 * every field, the shipped examples, and malformed input of many kinds
 * (each must give "FILE:LINE: field: message", never a crash or a leak).
 * The library reads its sections (porteiro_config.h), porteirod its own
 * (daemon/ops/daemon_config.c): a file is good when both accept it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/daemon_config.h"
#include "porteiro.h"
#include "porteiro_config.h"

/* porteirod's sections of text (which the library accepted). */
static pd_daemon_config *dparse(const char *text, char *err, size_t errlen) {
    err[0] = '\0';
    return pd_daemon_config_parse(text, strlen(text), "t.yaml", err, errlen);
}

/* The library's reading of text, once porteirod's part is good too. */
static porteiro_config *parse(const char *text, char *err, size_t errlen) {
    err[0] = '\0';
    porteiro_config *cfg = porteiro_config_parse(text, strlen(text), "t.yaml", err, errlen);
    if (cfg == NULL)
        return NULL;
    pd_daemon_config *d = dparse(text, err, errlen);
    if (d == NULL) {
        porteiro_config_free(cfg);
        return NULL;
    }
    pd_daemon_config_free(d);
    return cfg;
}

/* The shape issue 3 promises, byte for byte. */
static void issue_shape(void **state) {
    (void)state;
    const char *text = "redis:\n"
                       "  url: redis://127.0.0.1:6379/0\n"
                       "prefix: porteiro\n"
                       "policies:\n"
                       "  api:\n"
                       "    limits:\n"
                       "      - token_bucket 5/1s burst 10\n"
                       "      - fixed_window 1000/1h\n";
    char err[256];
    porteiro_config *cfg = parse(text, err, sizeof(err));
    assert_non_null(cfg);
    const porteiro_options *o = porteiro_config_options(cfg);
    assert_string_equal(o->redis_url, "redis://127.0.0.1:6379/0");
    assert_string_equal(o->prefix, "porteiro");
    assert_int_equal(o->on_error, PORTEIRO_ON_ERROR_OPEN);
    assert_int_equal(o->command_timeout_ms, 0); /* 0: the library default */
    assert_int_equal(porteiro_config_policy_count(cfg), 1);
    const porteiro_policy *api = porteiro_config_policy(cfg, "api");
    assert_non_null(api);
    assert_ptr_equal(api, porteiro_config_policy_at(cfg, 0));
    assert_null(porteiro_config_policy_at(cfg, 1));
    assert_null(porteiro_config_policy(cfg, "API"));
    assert_string_equal(api->name, "api");
    assert_int_equal(api->nlimits, 2);
    assert_int_equal(api->limits[0].algorithm, PORTEIRO_TOKEN_BUCKET);
    assert_int_equal(api->limits[0].limit, 5);
    assert_int_equal(api->limits[0].period_ms, 1000);
    assert_int_equal(api->limits[0].burst, 10);
    assert_int_equal(api->limits[1].algorithm, PORTEIRO_FIXED_WINDOW);
    assert_int_equal(api->limits[1].limit, 1000);
    assert_int_equal(api->limits[1].period_ms, 3600000);
    assert_false(api->shadow);
    assert_false(api->has_on_error);
    porteiro_config_free(cfg);
    pd_daemon_config *d = dparse(text, err, sizeof(err));
    assert_non_null(d);
    const pd_policy_config *apid = pd_daemon_config_policy(d, "api");
    assert_non_null(apid);
    assert_string_equal(apid->key, "client_address");
    assert_int_equal(apid->deny_status, 403);
    assert_string_equal(pd_daemon_config_listen(d), "127.0.0.1:8080");
    assert_int_equal(pd_daemon_config_client_header_timeout_ms(d), 10000);
    assert_int_equal(pd_daemon_config_admin(d)->nallowed_hosts, 0);
    assert_int_equal(pd_daemon_config_trusted_proxy_count(d), 0);
    pd_daemon_config_free(d);
}

/* Every other field, and the mapping form of a limit. */
static void all_fields(void **state) {
    (void)state;
    const char *text = "redis:\n"
                       "  url: unix:///tmp/redis.sock\n"
                       "  timeout_ms: 20\n"
                       "  connect_timeout_ms: 300\n"
                       "  on_error: local\n"
                       "  local_divisor: 3\n"
                       "  breaker_failures: -1\n"
                       "  breaker_cooldown_ms: 100\n"
                       "  module: off\n"
                       "prefix: \"rl\"\n"
                       "listen: '[::1]:9090'\n"
                       "client_header_timeout: 3s\n"
                       "admin:\n"
                       "  listen: 127.0.0.1:9091\n"
                       "  allowed_hosts: [porteiro.internal, 10.0.0.5, '[fd00::1]']\n"
                       "trusted_proxies: [10.0.0.0/8, '::1/128', 192.168.1.7/32]\n"
                       "policies:\n"
                       "  login:\n"
                       "    shadow: true\n"
                       "    on_error: closed\n"
                       "    key: header X-Api-Key\n"
                       "    deny_status: 429\n"
                       "    limits:\n"
                       "      - {algorithm: sliding_log, limit: 5, period: 1m}\n"
                       "      - algorithm: gcra\n"
                       "        limit: 10\n"
                       "        period: 250ms\n"
                       "        burst: 20\n"
                       "  other:\n"
                       "    limits: [sliding_window 50/1m]\n";
    char err[256];
    porteiro_config *cfg = parse(text, err, sizeof(err));
    if (cfg == NULL)
        fail_msg("%s", err);
    const porteiro_options *o = porteiro_config_options(cfg);
    assert_string_equal(o->redis_url, "unix:///tmp/redis.sock");
    assert_int_equal(o->command_timeout_ms, 20);
    assert_int_equal(o->connect_timeout_ms, 300);
    assert_int_equal(o->on_error, PORTEIRO_ON_ERROR_LOCAL);
    assert_int_equal(o->local_divisor, 3);
    assert_int_equal(o->breaker_failures, -1);
    assert_int_equal(o->breaker_cooldown_ms, 100);
    assert_int_equal(o->redis_module, PORTEIRO_MODULE_OFF);
    assert_string_equal(o->prefix, "rl");
    pd_daemon_config *d = dparse(text, err, sizeof(err));
    assert_non_null(d);
    assert_string_equal(pd_daemon_config_listen(d), "[::1]:9090");
    assert_int_equal(pd_daemon_config_client_header_timeout_ms(d), 3000);
    const pd_admin_config *ac = pd_daemon_config_admin(d);
    assert_int_equal(ac->nallowed_hosts, 3);
    assert_string_equal(ac->allowed_hosts[0], "porteiro.internal");
    assert_string_equal(ac->allowed_hosts[2], "[fd00::1]");
    assert_int_equal(pd_daemon_config_trusted_proxy_count(d), 3);
    assert_string_equal(pd_daemon_config_trusted_proxy_at(d, 1), "::1/128");
    assert_null(pd_daemon_config_trusted_proxy_at(d, 3));
    assert_string_equal(pd_daemon_config_policy(d, "login")->key, "header X-Api-Key");
    assert_int_equal(pd_daemon_config_policy(d, "login")->deny_status, 429);
    pd_daemon_config_free(d);
    const porteiro_policy *login = porteiro_config_policy(cfg, "login");
    assert_true(login->shadow);
    assert_true(login->has_on_error);
    assert_int_equal(login->on_error, PORTEIRO_ON_ERROR_CLOSED);
    assert_int_equal(login->nlimits, 2);
    assert_int_equal(login->limits[0].algorithm, PORTEIRO_SLIDING_LOG);
    assert_int_equal(login->limits[0].period_ms, 60000);
    assert_int_equal(login->limits[1].burst, 20);
    assert_int_equal(login->limits[1].period_ms, 250);
    assert_int_equal(porteiro_config_policy_at(cfg, 1)->limits[0].algorithm,
                     PORTEIRO_SLIDING_WINDOW);
    porteiro_config_free(cfg);
}

/* The shipped examples load, and a limiter runs their policies. */
static void examples_load(void **state) {
    (void)state;
    const char *dir = getenv("PORTEIRO_SOURCE_DIR");
    const char *files[] = {"examples/porteiro.yaml", "examples/memory.yaml"};
    for (size_t i = 0; i < 2; i++) {
        char path[1024], err[256];
        snprintf(path, sizeof(path), "%s/%s", dir != NULL ? dir : "..", files[i]);
        porteiro_config *cfg = porteiro_config_load(path, err, sizeof(err));
        if (cfg == NULL)
            fail_msg("%s", err);
        assert_true(porteiro_config_policy_count(cfg) >= 2);
        /* Decide in memory whatever the file's Redis says. */
        porteiro_options o = *porteiro_config_options(cfg);
        o.redis_url = NULL;
        porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
        assert_non_null(p);
        for (size_t k = 0; k < porteiro_config_policy_count(cfg); k++) {
            porteiro_decision d;
            assert_int_equal(porteiro_check_request(
                                 p,
                                 &(porteiro_request){.policy = porteiro_config_policy_at(cfg, k),
                                                     .key = "c",
                                                     .key_len = 1,
                                                     .cost = 1,
                                                     .now_ms = 1000},
                                 &d),
                             PORTEIRO_OK);
            assert_true(d.allowed);
        }
        porteiro_free(p);
        porteiro_config_free(cfg);
    }
}

typedef struct bad_case {
    const char *text;
    const char *error;
} bad_case;

static const bad_case bad[] = {
    {"redis: [1, 2]", "t.yaml:1: redis: expected a mapping"},
    {"redis:\n  batch_max: 0", "t.yaml:2: redis.batch_max: must be between 1 and 256"},
    {"redis:\n  module: on", "t.yaml:2: redis.module: expected auto or off, got 'on'"},
    {"memory:\n  max_keys: 7", "t.yaml:2: memory.max_keys: must be between 8 and 1000000000"},
    {"memory: 5", "t.yaml:1: memory: expected a mapping"},
    {"deny_cache: on", "t.yaml:1: deny_cache: expected off or a mapping (max_keys), got 'on'"},
    {"deny_cache:\n  max_keys: 0", "t.yaml:2: deny_cache.max_keys: must be between 1 and 10000000"},
    {"deny_cache:\n  size: 5", "t.yaml:2: deny_cache.size: unknown field"},
    {"redis:\n  url: redis://x\n  colour: red", "t.yaml:3: redis.colour: unknown field"},
    {"redis:\n  url: redis://a\n  url: redis://b", "t.yaml:3: redis.url: given twice"},
    {"redis:\n  timeout_ms: fast", "t.yaml:2: redis.timeout_ms: expected an integer, got 'fast'"},
    {"redis:\n  timeout_ms: 0", "t.yaml:2: redis.timeout_ms: must be between 1 and 60000"},
    {"redis:\n  timeout_ms: 99999999999999999999999",
     "t.yaml:2: redis.timeout_ms: must be between 1 and 60000"},
    {"redis:\n  on_error: maybe",
     "t.yaml:2: redis.on_error: expected one of open, closed, local, error, got 'maybe'"},
    {"redis:\n  url: \"\"", "t.yaml:2: redis.url: must not be empty"},
    {"redis:\n  url: ~", "t.yaml:2: redis.url: expected a string, got null"},
    {"redis:\n  url: http://x",
     "t.yaml:2: redis.url: invalid redis url: must start with redis://, rediss://, unix://, redis[s]+cluster:// or "
     "redis[s]+sentinel://"},
    {"redis:\n  local_divisor: 0", "t.yaml:2: redis.local_divisor: must be between 1 and 10000"},
    {"redis:\n  cluster: [a]",
     "t.yaml:2: redis.cluster[0]: invalid redis url: node: host:port expected (no port)"},
    {"redis:\n  cluster: [\"a:1\", \"b:0\"]",
     "t.yaml:2: redis.cluster[1]: invalid redis url: node: port must be 1..65535"},
    {"redis:\n  cluster: []", "t.yaml:2: redis.cluster: must list 1..16 host:port"},
    {"redis:\n  cluster: a:1", "t.yaml:2: redis.cluster: must be a list of host:port"},
    {"redis:\n  sentinel: {nodes: [\"a:1\"]}", "t.yaml:2: redis.sentinel: missing field 'master'"},
    {"redis:\n  sentinel: {master: m}", "t.yaml:2: redis.sentinel: missing field 'nodes'"},
    {"redis:\n  sentinel: {master: m, nodes: [\":1\"]}",
     "t.yaml:2: redis.sentinel.nodes[0]: invalid redis url: node: no host"},
    {"redis:\n  cluster: [\"a:1\"]\n  sentinel: {master: m, nodes: [\"a:1\"]}",
     "t.yaml:2: redis: give one of cluster, sentinel"},
    {"redis:\n  cluster: [\"a:1\"]\n  url: redis://x",
     "t.yaml:2: redis: give one of url, cluster, sentinel"},
    {"redis:\n  password: x",
     "t.yaml:2: redis: username/password go with cluster or sentinel (put them in url)"},
    {"prefix: [a]", "t.yaml:1: prefix: expected a string"},
    {"prefix: \"a\\0b\"", "t.yaml:1: prefix: contains a NUL byte"},
    {"listen: localhost",
     "t.yaml:1: listen: expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080"},
    {"listen: 127.0.0.1:70000",
     "t.yaml:1: listen: expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080"},
    {"listen: \"[::1:8080\"",
     "t.yaml:1: listen: expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080"},
    {"trusted_proxies: 10.0.0.0/8", "t.yaml:1: trusted_proxies: expected a list of CIDR strings"},
    {"client_header_timeout: 500ms",
     "t.yaml:1: client_header_timeout: expected a duration from 1s to 1h, such as 10s, got '500ms'"},
    {"client_header_timeout: 2h",
     "t.yaml:1: client_header_timeout: expected a duration from 1s to 1h, such as 10s, got '2h'"},
    {"admin:\n  listen: 127.0.0.1:1\n  allowed_hosts: example.com",
     "t.yaml:3: admin.allowed_hosts: expected a list of host names"},
    {"admin:\n  listen: 127.0.0.1:1\n  allowed_hosts: ['example.com:8080']",
     "t.yaml:3: admin.allowed_hosts[0]: expected a host name or address without port, such as "
     "porteiro.internal or 10.0.0.5, got 'example.com:8080'"},
    {"trusted_proxies:\n  - 10.0.0.0/8\n  - 10.0.0.300/8",
     "t.yaml:3: trusted_proxies[1]: expected a CIDR such as 10.0.0.0/8 or ::1/128, got "
     "'10.0.0.300/8'"},
    {"trusted_proxies:\n  - 10.0.0.0/33",
     "t.yaml:2: trusted_proxies[0]: expected a CIDR such as 10.0.0.0/8 or ::1/128, got "
     "'10.0.0.0/33'"},
    {"policies: []", "t.yaml:1: policies: expected a mapping of policy names to policies"},
    {"policies:\n  api: {}", "t.yaml:2: policies.api: missing field 'limits'"},
    {"policies:\n  api:\n    limits: []",
     "t.yaml:3: policies.api.limits: a policy has 1 to 8 limits"},
    {"policies:\n  api:\n    limits:\n      - token_bucket 5/1s burst 10\n      - fixed 10/1m",
     "t.yaml:5: policies.api.limits[1]: unknown algorithm 'fixed'"},
    {"policies:\n  api:\n    limits:\n      - fixed_window 10/1x",
     "t.yaml:4: policies.api.limits[0]: limit 'fixed_window 10/1x': the period must be an "
     "integer with a unit (ms, s, m, h, d)"},
    {"policies:\n  api:\n    limits:\n      - fixed_window 10/1m burst 3",
     "t.yaml:4: policies.api.limits[0]: limit 'fixed_window 10/1m burst 3': burst applies only "
     "to token_bucket and gcra"},
    {"policies:\n  api:\n    limits:\n      - concurrency 10/1m",
     "t.yaml:4: policies.api.limits[0]: concurrency limits are taken with acquire/release, not "
     "checked in a policy"},
    {"policies:\n  api:\n    limits:\n      - algorithm: gcra\n        limit: 10",
     "t.yaml:4: policies.api.limits[0]: missing field 'period'"},
    {"policies:\n  api:\n    limits:\n      - algorithm: gcra\n        limit: 10\n        period: "
     "1s\n        burts: 3",
     "t.yaml:7: policies.api.limits[0].burts: unknown field"},
    {"policies:\n  api:\n    limits:\n      - algorithm: fixed_window\n        limit: 10\n      "
     "  period: 1s\n        burst: 3",
     "t.yaml:4: policies.api.limits[0]: burst applies only to token_bucket and gcra"},
    {"policies:\n  api:\n    limits:\n      - algorithm: sliding_log\n        limit: 1001\n      "
     "  period: 1s",
     "t.yaml:4: policies.api.limits[0]: sliding_log: limit must be at most 1000 (its state is "
     "O(limit) per key)"},
    {"policies:\n  api:\n    limits:\n      - algorithm: gcra\n        limit: -1\n        period: 1s",
     "t.yaml:5: policies.api.limits[0].limit: must be between 1 and 1000000000"},
    {"policies:\n  api:\n    limits:\n      - algorithm: gcra\n        limit: 1\n        period: 1y",
     "t.yaml:6: policies.api.limits[0].period: expected a duration such as 250ms, 1s, 1m, 1h, "
     "1d, got '1y'"},
    {"policies:\n  api:\n    limits:\n      - [gcra, 1]",
     "t.yaml:4: policies.api.limits[0]: expected a limit such as 'token_bucket 5/1s burst 10'"},
    {"policies:\n  api:\n    limits: [gcra 1/1s, gcra 2/1s, gcra 3/1s, gcra 4/1s, gcra 5/1s, "
     "gcra 6/1s, gcra 7/1s, gcra 8/1s, gcra 9/1s]",
     "t.yaml:3: policies.api.limits: a policy has 1 to 8 limits"},
    {"policies:\n  api:\n    shadow: yes\n    limits: [gcra 1/1s]",
     "t.yaml:3: policies.api.shadow: expected true or false, got 'yes'"},
    {"policies:\n  api:\n    on_error: sometimes\n    limits: [gcra 1/1s]",
     "t.yaml:3: policies.api.on_error: expected one of open, closed, local, error, got "
     "'sometimes'"},
    {"policies:\n  api:\n    key: cookie session\n    limits: [gcra 1/1s]",
     "t.yaml:3: policies.api.key: expected 'client_address' or 'header NAME', got 'cookie "
     "session'"},
    {"policies:\n  api:\n    key: \"header \"\n    limits: [gcra 1/1s]",
     "t.yaml:3: policies.api.key: expected 'client_address' or 'header NAME', got 'header '"},
    {"policies:\n  api:\n    deny_status: 200\n    limits: [gcra 1/1s]",
     "t.yaml:3: policies.api.deny_status: must be between 400 and 599"},
    {"policies:\n  \"bad name!\":\n    limits: [gcra 1/1s]",
     "t.yaml:2: policies.bad name!: a policy name is 1 to 64 letters, digits, '_', '-' or '.'"},
    {"policies:\n  api:\n    limits: [gcra 1/1s]\n  api:\n    limits: [gcra 2/1s]",
     "t.yaml:4: policies.api: policy defined twice"},
    {"policies:\n  api:\n    limits: [gcra 1/1s]\n    extra: 1",
     "t.yaml:4: policies.api.extra: unknown field"},
    {"polices:\n  api:\n    limits: [gcra 1/1s]", "t.yaml:1: polices: unknown field"},
    {"[1, 2, 3]", "t.yaml:1: config: expected a mapping"},
    {"just a string", "t.yaml:1: config: expected a mapping"},
    {"", "t.yaml:1: config: the file is empty (expected a mapping)"},
    {"# only a comment\n", "t.yaml:1: config: the file is empty (expected a mapping)"},
    {"redis: {url: redis://x\n",
     "t.yaml:2: syntax: did not find expected ',' or '}' while parsing a flow mapping"},
    {"a: b\n---\nc: d", "t.yaml:3: document: only one YAML document is allowed"},
    {"\"\x01\x02\"", "t.yaml:1: syntax: control characters are not allowed"},
    {"? [a, b]\n: c", "t.yaml:1: config: expected a field name"},
    {"policies:\n  &a api: *a", "t.yaml:2: policies.api: expected a mapping"},
    {"x: &a [*a]", "t.yaml:1: x: unknown field"},
    {"redis:\n  url: redis://x\n\tbad: tab",
     "t.yaml:3: syntax: found a tab character that violates indentation while scanning a plain "
     "scalar"},
};

/* The explicit cluster and sentinel forms become the URL forms. */
static void cluster_and_sentinel_forms(void **state) {
    (void)state;
    static const struct {
        const char *text, *url;
    } good[] = {
        {"redis:\n  cluster: [\"10.0.0.1:6379\", \"10.0.0.2:6380\"]",
         "redis+cluster://10.0.0.1:6379,10.0.0.2:6380"},
        {"redis:\n  cluster: [\"h:1\"]\n  username: u\n  password: p", "redis+cluster://u:p@h:1"},
        {"redis:\n  sentinel: {master: mymaster, nodes: [\"s1:26379\", \"s2:26379\"], "
         "password: sp}\n  password: p",
         "redis+sentinel://:p@s1:26379,s2:26379/mymaster"},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char err[300] = "";
        porteiro_config *cfg = parse(good[i].text, err, sizeof(err));
        if (cfg == NULL)
            fail_msg("case %zu: %s", i, err);
        assert_string_equal(porteiro_config_options(cfg)->redis_url, good[i].url);
        porteiro_config_free(cfg);
    }
    char err[300];
    porteiro_config *cfg = parse(good[2].text, err, sizeof(err));
    assert_non_null(cfg);
    assert_string_equal(porteiro_config_options(cfg)->sentinel_password, "sp");
    porteiro_config_free(cfg);
}

static void malformed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[300];
        porteiro_config *cfg = parse(bad[i].text, err, sizeof(err));
        if (cfg != NULL || strcmp(err, bad[i].error) != 0)
            fail_msg("case %zu: got '%s'\n  want '%s'", i, cfg ? "(accepted)" : err, bad[i].error);
    }
}

/* Whatever the bytes, the answer is a config or "t.yaml:LINE: ..." — never
 * a crash, a hang or a leak (ASan checks the last two). */
static void expect_clean(const char *text, size_t len) {
    char err[300] = "";
    porteiro_config *cfg = porteiro_config_parse(text, len, "t.yaml", err, sizeof(err));
    if (cfg == NULL && strncmp(err, "t.yaml:", 7) != 0)
        fail_msg("no location in '%s'", err);
    if (cfg != NULL) { /* and porteirod's reading of what the library took */
        pd_daemon_config *d = pd_daemon_config_parse(text, len, "t.yaml", err, sizeof(err));
        if (d == NULL && strncmp(err, "t.yaml:", 7) != 0)
            fail_msg("no location in '%s'", err);
        pd_daemon_config_free(d);
    }
    porteiro_config_free(cfg);
}

static const char valid[] = "redis:\n  url: redis://127.0.0.1:6379/0\n  on_error: local\n"
                            "prefix: porteiro\ntrusted_proxies: [10.0.0.0/8]\npolicies:\n"
                            "  api:\n    key: header X-Api-Key\n    limits:\n"
                            "      - token_bucket 5/1s burst 10\n"
                            "      - {algorithm: fixed_window, limit: 1000, period: 1h}\n";

static void junk_and_mutations(void **state) {
    (void)state;
    uint64_t rng = 0x853c49e6748fea9bULL;
    char buf[512];
    size_t n = sizeof(valid) - 1;
    /* Every prefix of a valid file. */
    for (size_t cut = 0; cut <= n; cut++)
        expect_clean(valid, cut);
    for (int round = 0; round < 3000; round++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        if (round % 2 == 0) {
            /* Binary junk of random length. */
            size_t len = rng % sizeof(buf);
            for (size_t i = 0; i < len; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                buf[i] = (char)(rng >> 24);
            }
            expect_clean(buf, len);
        } else {
            /* The valid file with a few bytes changed. */
            memcpy(buf, valid, n);
            for (int k = 0; k < 3; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                buf[rng % n] = "\0\t\n :-[]{}#&*!|>'\"%@`?,0zZ\x80\xff"[(rng >> 32) % 29];
            }
            expect_clean(buf, n);
        }
    }
}

static void file_errors(void **state) {
    (void)state;
    char err[300];
    assert_null(porteiro_config_load("/nonexistent/porteiro.yaml", err, sizeof(err)));
    assert_string_equal(err, "/nonexistent/porteiro.yaml:0: file: No such file or directory");
    assert_null(porteiro_config_load(NULL, err, sizeof(err)));
    assert_null(porteiro_config_parse(NULL, 0, "x", err, sizeof(err)));
    /* Over 1 MiB: refused before parsing. */
    char path[] = "/tmp/porteiro-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static char big[1024 * 1024 + 10];
    memset(big, '#', sizeof(big));
    assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
    close(fd);
    assert_null(porteiro_config_load(path, err, sizeof(err)));
    assert_non_null(strstr(err, ":0: file: larger than 1 MiB"));
    unlink(path);
    /* A tiny error buffer is truncated, never overrun. */
    char tiny[8];
    assert_null(parse("x: 1", tiny, sizeof(tiny)));
    assert_string_equal(tiny, "t.yaml:");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(issue_shape),
        cmocka_unit_test(all_fields),
        cmocka_unit_test(examples_load),
        cmocka_unit_test(malformed),
        cmocka_unit_test(cluster_and_sentinel_forms),
        cmocka_unit_test(junk_and_mutations),
        cmocka_unit_test(file_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
