/* test_daemon_tiers.c — per-client tiers and overrides, through porteirod
 * over real HTTP and the porteiro CLI:
 *   - tiers chosen by a header (absent or unknown: the default tier; each
 *     tier's limits), said in /v1/check's JSON and in Porteiro-Limits;
 *   - a client moved to another tier keeps what it used;
 *   - the config file's overrides; an override set with `porteiro override`
 *     seen by a running porteirod within 1 s, and its removal too;
 *   - INFO commandstats: a client without an override costs Redis nothing
 *     more than its check (the local copy reads one version key per 500 ms);
 *   - bad override text, the memory backend, bad actions: exit 2 and why;
 *   - the config file's rules for tiers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_client.h"
#include "porteiro.h"
#include "porteiro_config.h"
#include "redis_server.h"

/* fixed_window per hour: nothing refills during a test, counts are exact. */
static const char *const POLICIES = "policies:\n"
                                    "  api:\n"
                                    "    key: header X-Api-Key\n"
                                    "    tier: header X-Plan\n"
                                    "    default_tier: free\n"
                                    "    tiers:\n"
                                    "      free: [fixed_window 2/366d]\n"
                                    "      pro:\n"
                                    "        - fixed_window 5/366d\n"
                                    "    overrides:\n"
                                    "      vip: fixed_window 100/366d\n"
                                    "  plain:\n"
                                    "    limits: [fixed_window 1000/366d]\n";

static void config_with(char *out, size_t outlen, const char *redis_url) {
    int n = snprintf(out, outlen, "listen: 127.0.0.1:%%PORT%%\nprefix: tiers\n");
    if (redis_url != NULL)
        n += snprintf(out + n, outlen - (size_t)n, "redis:\n  url: %s\n  timeout_ms: 1000\n",
                      redis_url);
    snprintf(out + n, outlen - (size_t)n, "%s", POLICIES);
}

/* POST /v1/check {"policy":policy,"key":key}, with an X-Plan header when plan. */
static void check(test_daemon *d, const char *policy, const char *key, const char *plan,
                  http_response *r) {
    char body[256], headers[256] = "Content-Type: application/json\r\n";
    snprintf(body, sizeof(body), "{\"policy\":\"%s\",\"key\":\"%s\"}", policy, key);
    if (plan != NULL)
        snprintf(headers + strlen(headers), sizeof(headers) - strlen(headers), "X-Plan: %s\r\n",
                 plan);
    assert_int_equal(http_request(d->port, "POST", "/v1/check", headers, body, r), 0);
}

static void expect_in(const http_response *r, const char *text) {
    if (strstr(r->body, text) == NULL && strstr(r->head, text) == NULL)
        print_error("wanted [%s] in:\n%s\n%s\n", text, r->head, r->body);
    assert_true(strstr(r->body, text) != NULL || strstr(r->head, text) != NULL);
}

static void expect_not_in(const http_response *r, const char *text) {
    if (strstr(r->body, text) != NULL || strstr(r->head, text) != NULL)
        print_error("did not want [%s] in:\n%s\n%s\n", text, r->head, r->body);
    assert_null(strstr(r->body, text));
    assert_null(strstr(r->head, text));
}

static void header_is(const http_response *r, const char *name, const char *want) {
    char buf[256];
    const char *v = http_header(r, name, buf, sizeof(buf));
    if (want == NULL) {
        assert_null(v);
        return;
    }
    if (v == NULL || strcmp(v, want) != 0)
        print_error("%s: [%s], want [%s]\n", name, v != NULL ? v : "(none)", want);
    assert_non_null(v);
    assert_string_equal(v, want);
}

/* ---- tiers -------------------------------------------------------------- */

static void tiers_by_header(void **state) {
    (void)state;
    char yaml[2048];
    config_with(yaml, sizeof(yaml), NULL);
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, yaml, NULL);

    /* No header: the default tier. */
    check(&d, "api", "a", NULL, &r);
    assert_int_equal(r.status, 200);
    expect_in(&r, "\"limit\":2,\"remaining\":1,");
    expect_in(&r, "\"tier\":\"free\"");
    expect_not_in(&r, "\"override\"");
    header_is(&r, "Porteiro-Limits", "tier=free");
    header_is(&r, "RateLimit-Policy", "\"api\";q=2;w=31622400");
    /* An unknown tier: the default too (and the same client's usage). */
    check(&d, "api", "a", "platinum", &r);
    expect_in(&r, "\"limit\":2,\"remaining\":0,");
    expect_in(&r, "\"tier\":\"free\"");
    /* Each tier's limits. */
    check(&d, "api", "b", "pro", &r);
    expect_in(&r, "\"limit\":5,\"remaining\":4,");
    expect_in(&r, "\"tier\":\"pro\"");
    header_is(&r, "Porteiro-Limits", "tier=pro");
    header_is(&r, "RateLimit-Policy", "\"api\";q=5;w=31622400");
    check(&d, "api", "c", "free", &r);
    expect_in(&r, "\"limit\":2,\"remaining\":1,");
    /* The file's override for a client beats its tier. */
    check(&d, "api", "vip", "pro", &r);
    expect_in(&r, "\"limit\":100,\"remaining\":99,");
    expect_in(&r, "\"tier\":\"pro\",\"override\":\"config\"");
    header_is(&r, "Porteiro-Limits", "override=config; tier=pro");
    /* /v1/auth: the key and the tier from headers; the answer says which. */
    assert_int_equal(http_request(d.port, "GET", "/v1/auth?policy=api",
                                  "X-Api-Key: d\r\nX-Plan: pro\r\n", NULL, &r),
                     0);
    assert_int_equal(r.status, 204);
    header_is(&r, "Porteiro-Limits", "tier=pro");
    char buf[128];
    assert_non_null(http_header(&r, "RateLimit", buf, sizeof(buf)));
    assert_int_equal(strncmp(buf, "\"api\";r=4;t=", 12), 0);
    /* A policy without tiers says nothing of them. */
    check(&d, "plain", "a", "pro", &r);
    assert_int_equal(r.status, 200);
    expect_not_in(&r, "\"tier\"");
    header_is(&r, "Porteiro-Limits", NULL);
    test_daemon_must_finish(&d);
}

/* Keys name client, algorithm and period: both tiers' fixed_window/1h is
 * one state, so what was used in one tier counts in the other. On the
 * memory backend and on Redis (with porteirod's deny cache: a denial under
 * one tier's limits is never answered for another's). */
static void tier_change_keeps_usage(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    for (int on_redis = 0; on_redis < 2; on_redis++) {
        char yaml[2048];
        config_with(yaml, sizeof(yaml), on_redis ? redis.url : NULL);
        test_daemon d;
        http_response r;
        test_daemon_must_start(&d, yaml, NULL);
        check(&d, "api", "mover", NULL, &r);
        check(&d, "api", "mover", NULL, &r);
        expect_in(&r, "\"remaining\":0,");
        check(&d, "api", "mover", NULL, &r);
        assert_int_equal(r.status, 429); /* free: 2 used of 2 */
        check(&d, "api", "mover", "pro", &r);
        assert_int_equal(r.status, 200); /* pro: the 3rd of 5 */
        expect_in(&r, "\"limit\":5,\"remaining\":2,");
        check(&d, "api", "mover", "pro", &r);
        check(&d, "api", "mover", "pro", &r);
        expect_in(&r, "\"remaining\":0,");
        check(&d, "api", "mover", "pro", &r);
        assert_int_equal(r.status, 429);
        check(&d, "api", "mover", "free", &r); /* back: 5 used, over free's 2 */
        assert_int_equal(r.status, 429);
        expect_in(&r, "\"limit\":2,\"remaining\":0,");
        test_daemon_must_finish(&d);
    }
    test_redis_stop(&redis);
}

/* ---- overrides in Redis ------------------------------------------------ */

/* Runs the porteiro CLI; returns its exit status, output in out. */
static int cli_run(char *out, size_t outlen, const char *const *args) {
    const char *argv[16] = {getenv("PORTEIRO_CLI")};
    for (size_t i = 0; args[i] != NULL && i < 14; i++)
        argv[i + 1] = args[i];
    return test_run(argv, out, outlen);
}
#define CLI(out, ...) cli_run(out, sizeof(out), (const char *const[]){__VA_ARGS__, NULL})

static int64_t mono_ms(void) {
    return test_mono_ms();
}

/* Polls /v1/check (a peek: cost 0) until its body holds want; returns the ms it took, or -1
 * after 3 s. */
static int64_t wait_for(test_daemon *d, const char *key, const char *want) {
    int64_t start = mono_ms();
    char body[256];
    snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"%s\",\"cost\":0}", key);
    while (mono_ms() - start < 3000) {
        http_response r;
        if (http_request(d->port, "POST", "/v1/check", "Content-Type: application/json\r\n", body,
                         &r) == 0 &&
            strstr(r.body, want) != NULL)
            return mono_ms() - start;
        test_sleep_ms(10);
    }
    return -1;
}

static void override_from_cli_seen_within_1s(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char yaml[2048], out[4096];
    config_with(yaml, sizeof(yaml), redis.url);
    test_daemon d, d2; /* two porteirods on one Redis: each sees a change */
    http_response r;
    test_daemon_must_start(&d, yaml, NULL);
    test_daemon_must_start(&d2, yaml, NULL);
    check(&d, "api", "c1", NULL, &r);
    expect_in(&r, "\"limit\":2,\"remaining\":1,");

    int64_t worst = 0;
    for (int round = 0; round < 3; round++) {
        /* set: every porteirod sees it within 1 s; the client keeps its usage. */
        int64_t t0 = mono_ms();
        int rc = CLI(out, "override", "set", "--policy", "api", "--redis", redis.url, "--prefix",
                     "tiers", "c1", "fixed_window 7/366d");
        if (rc != 0)
            print_error("%s", out);
        assert_int_equal(rc, 0);
        assert_string_equal(out, "{\"key\":\"c1\",\"limits\":\"fixed_window 7/366d\"}\n");
        int64_t set_ms = mono_ms() - t0; /* the CLI's own start and round trips */
        int64_t seen = wait_for(&d, "c1", "\"override\":\"redis\"");
        int64_t seen2 = wait_for(&d2, "c1", "\"override\":\"redis\""); /* after seen */
        print_message("round %d: override seen %lld ms after the CLI returned, by the second "
                      "porteirod %lld ms after that (CLI: %lld ms)\n",
                      round, (long long)seen, (long long)seen2, (long long)set_ms);
        assert_true(seen >= 0 && seen <= 1000);
        assert_true(seen2 >= 0 && seen + seen2 <= 1000);
        worst = seen + seen2 > worst ? seen + seen2 : worst;
        /* The client keeps its usage: round + 1 used before, this is one more. */
        check(&d, "api", "c1", "pro", &r);
        char want[64];
        snprintf(want, sizeof(want), "\"limit\":7,\"remaining\":%d,", 7 - (round + 2));
        expect_in(&r, want);
        expect_in(&r, "\"tier\":\"pro\",\"override\":\"redis\"");
        header_is(&r, "Porteiro-Limits", "override=redis; tier=pro");
        /* del: back to the tier within 1 s. */
        rc = CLI(out, "override", "del", "--policy", "api", "--redis", redis.url, "--prefix",
                 "tiers", "c1");
        assert_int_equal(rc, 0);
        assert_string_equal(out, "{\"deleted\":true}\n");
        seen = wait_for(&d, "c1", "\"tier\":\"free\"}");
        seen2 = wait_for(&d2, "c1", "\"tier\":\"free\"}");
        assert_true(seen >= 0 && seen2 >= 0 && seen + seen2 <= 1000);
        worst = seen + seen2 > worst ? seen + seen2 : worst;
    }
    print_message("worst: %lld ms\n", (long long)worst);
    test_daemon_must_finish(&d2);
    /* get, list, and del of what is not there. */
    assert_int_equal(CLI(out, "override", "get", "--policy", "api", "--redis", redis.url,
                         "--prefix", "tiers", "c1"),
                     1);
    assert_string_equal(out, "{\"key\":\"c1\",\"limits\":null}\n");
    assert_int_equal(CLI(out, "override", "del", "--policy", "api", "--redis", redis.url,
                         "--prefix", "tiers", "c1"),
                     1);
    assert_int_equal(CLI(out, "override", "set", "--policy", "api", "--redis", redis.url,
                         "--prefix", "tiers", "k2", "gcra 10/1s burst 20,fixed_window 5000/1d"),
                     0);
    assert_string_equal(out, "{\"key\":\"k2\",\"limits\":\"gcra 10/1s burst 20, fixed_window "
                             "5000/1d\"}\n");
    assert_int_equal(
        CLI(out, "override", "list", "--policy", "api", "--redis", redis.url, "--prefix", "tiers"),
        0);
    assert_string_equal(out, "{\"key\":\"k2\",\"limits\":\"gcra 10/1s burst 20, fixed_window "
                             "5000/1d\"}\n");
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

/* The calls of one command in INFO commandstats. */
static long long calls_of(const char *stats, const char *cmd) {
    char pat[64];
    snprintf(pat, sizeof(pat), "cmdstat_%s:calls=", cmd);
    const char *at = strstr(stats, pat);
    return at != NULL ? atoll(at + strlen(pat)) : 0;
}

/* Every call but INFO itself, summed. */
static long long all_calls(const char *stats) {
    long long n = 0;
    for (const char *at = strstr(stats, "cmdstat_"); at != NULL; at = strstr(at + 1, "cmdstat_"))
        if (strncmp(at, "cmdstat_info:", 13) != 0)
            n += atoll(strstr(at, "calls=") + 6);
    return n;
}

/* N allowed checks, the keys and limits porteirod gets below, through the
 * library on its own prefix: what Redis counts for the checks alone
 * (INFO commandstats also counts the commands a script calls). */
static long long baseline_calls(test_redis *redis, int n) {
    char before[8192], after[8192];
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = redis->url;
    o.prefix = "baseline";
    o.command_timeout_ms = 2000;
    porteiro_status st;
    char err[256];
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    assert_non_null(p);
    porteiro_limit plain = {PORTEIRO_FIXED_WINDOW, 1000, 3600000, 0};
    porteiro_limit free_tier = {PORTEIRO_FIXED_WINDOW, 2, 3600000, 0};
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, &plain, "warm", 1, &d), PORTEIRO_OK); /* script loaded */
    assert_int_equal(test_redis_cmd(redis, before, sizeof(before), "INFO commandstats"), 0);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i % 150);
        assert_int_equal(porteiro_check(p, i % 2 ? &free_tier : &plain, key, 1, &d), PORTEIRO_OK);
        assert_true(d.allowed);
    }
    assert_int_equal(test_redis_cmd(redis, after, sizeof(after), "INFO commandstats"), 0);
    porteiro_free(p);
    return all_calls(after) - all_calls(before);
}

static void no_redis_call_for_clients_without_override(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char yaml[2048], before[8192], after[8192], out[1024];
    config_with(yaml, sizeof(yaml), redis.url);
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, yaml, NULL);
    /* Some override exists (for another client): the copy is not empty. */
    assert_int_equal(CLI(out, "override", "set", "--policy", "api", "--redis", redis.url,
                         "--prefix", "tiers", "someone", "fixed_window 9/366d"),
                     0);
    assert_true(wait_for(&d, "someone", "\"override\":\"redis\"") >= 0);
    enum { N = 300 };
    long long base = baseline_calls(&redis, N);
    check(&d, "plain", "warm", NULL, &r); /* the worker's script loaded */
    assert_int_equal(test_redis_cmd(&redis, before, sizeof(before), "INFO commandstats"), 0);
    int64_t t0 = mono_ms();
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i % 150); /* api: 2 checks a key, all allowed */
        check(&d, i % 2 ? "api" : "plain", key, i % 3 ? "pro" : NULL, &r);
        assert_int_equal(r.status, 200);
    }
    int64_t elapsed = mono_ms() - t0;
    assert_int_equal(test_redis_cmd(&redis, after, sizeof(after), "INFO commandstats"), 0);
    long long scripts = calls_of(after, "evalsha") - calls_of(before, "evalsha");
    long long total = all_calls(after) - all_calls(before);
    long long reloads = calls_of(after, "hgetall") - calls_of(before, "hgetall");
    print_message("%d checks in %lld ms: %lld calls counted (%lld EVALSHA), %lld for the same "
                  "checks through the library: %lld more\n",
                  N, (long long)elapsed, total, scripts, base, total - base);
    /* One script call per check; besides, only the version read, once per 500 ms. */
    assert_int_equal(scripts, N);
    assert_true(total - base >= 0);
    assert_true(total - base <= elapsed / 500 + 2);
    assert_int_equal(reloads, 0);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

/* ---- the CLI's errors -------------------------------------------------- */

static void bad_override_input_exits_2(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char out[2048];
    /* Bad limits text: exit 2, the message names the problem; nothing stored. */
    int rc =
        CLI(out, "override", "set", "--policy", "api", "--redis", redis.url, "k", "gcra 10/1x");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "porteiro override: limit 'gcra 10/1x': "));
    rc = CLI(out, "override", "set", "--policy", "api", "--redis", redis.url, "k",
             "sliding_log 5000/1m");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "1000"));
    rc = CLI(out, "override", "set", "--policy", "api", "--redis", redis.url, "k",
             "concurrency 5/1m");
    assert_int_equal(rc, 2);
    rc = CLI(out, "override", "list", "--policy", "api", "--redis", redis.url);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "");
    /* The memory backend keeps overrides in the config file only. */
    rc = CLI(out, "override", "set", "--policy", "api", "--redis", "", "k", "gcra 1/1s");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "memory backend takes overrides only from the config file"));
    /* Bad actions and operands, a policy not in --config, a bad policy name. */
    rc = CLI(out, "override", "put", "--policy", "api", "--redis", redis.url, "k");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "unknown action 'put'"));
    rc = CLI(out, "override", "set", "--policy", "api", "--redis", redis.url, "k");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "set takes KEY 'LIMITS'"));
    rc = CLI(out, "override", "get", "--redis", redis.url, "k");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "needs --policy NAME"));
    char path[300];
    snprintf(path, sizeof(path), "%s/examples/porteiro.yaml", getenv("PORTEIRO_SOURCE_DIR"));
    rc = CLI(out, "override", "get", "--policy", "nope", "--config", path, "k");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "no policy 'nope'"));
    rc = CLI(out, "override", "get", "--policy", "a b", "--redis", redis.url, "k");
    assert_int_equal(rc, 2);
    test_redis_stop(&redis);
}

/* porteiro check --tier: the tier's limits, the file's overrides. */
static void cli_check_tier(void **state) {
    (void)state;
    char path[] = "/tmp/porteiro-tiers-XXXXXX", out[2048];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(POLICIES, f);
    fclose(f);
    assert_int_equal(CLI(out, "check", "--config", path, "--policy", "api", "--tier", "pro", "u"),
                     0);
    assert_non_null(strstr(out, "{\"allowed\":true,\"limit\":5,\"remaining\":4,"));
    assert_int_equal(CLI(out, "check", "--config", path, "--policy", "api", "u"), 0);
    assert_non_null(strstr(out, "{\"allowed\":true,\"limit\":2,\"remaining\":1,"));
    assert_int_equal(CLI(out, "check", "--config", path, "--policy", "api", "--tier", "gold", "u"),
                     0);
    assert_non_null(strstr(out, "\"limit\":2,"));
    assert_int_equal(CLI(out, "check", "--config", path, "--policy", "api", "vip"), 0);
    assert_non_null(strstr(out, "\"limit\":100,"));
    assert_int_equal(CLI(out, "check", "--limits", "gcra 1/1s", "--tier", "pro", "u"), 2);
    assert_non_null(strstr(out, "--tier needs --config FILE --policy NAME"));
    unlink(path);
}

/* ---- the config file's rules ------------------------------------------ */

static void config_rules(void **state) {
    (void)state;
    static const struct {
        const char *yaml, *error;
    } cases[] = {
        {"policies:\n  a:\n    tiers: {f: [gcra 1/1s]}\n    default_tier: f\n",
         "t.yaml:3: policies.a: tiers need 'tier: header NAME'"},
        {"policies:\n  a:\n    tier: header X-Plan\n    tiers: {f: [gcra 1/1s]}\n",
         "t.yaml:3: policies.a: tiers need default_tier"},
        {"policies:\n  a:\n    tier: header X-Plan\n    tiers: {f: [gcra 1/1s]}\n"
         "    default_tier: g\n",
         "t.yaml:3: policies.a: default_tier names no tier of tiers"},
        {"policies:\n  a:\n    limits: [gcra 1/1s]\n    tier: header X-Plan\n"
         "    tiers: {f: [gcra 1/1s]}\n    default_tier: f\n",
         "t.yaml:3: policies.a: give limits or tiers, not both"},
        {"policies:\n  a:\n    limits: [gcra 1/1s]\n    default_tier: f\n",
         "t.yaml:3: policies.a: tier and default_tier go with tiers"},
        {"policies:\n  a:\n    tier: cookie plan\n    tiers: {f: [gcra 1/1s]}\n    default_tier: f\n",
         "t.yaml:3: policies.a.tier: expected 'header NAME', got 'cookie plan'"},
        {"policies:\n  a:\n    tier: header X\n    tiers: {f: [gcra 1/1x]}\n    default_tier: f\n",
         "t.yaml:4: policies.a.tiers.f[0]: "},
        {"policies:\n  a:\n    limits: [gcra 1/1s]\n    overrides: {k: 'gcra 1/1s, nope 2/1s'}\n",
         "t.yaml:4: policies.a.overrides.k: "},
        {"policies:\n  a:\n    limits: [gcra 1/1s]\n    overrides: {k: [gcra 1/1s], k: [gcra 2/1s]}\n",
         "t.yaml:3: policies.a: overrides: a client key is given twice"},
        {"policies:\n  a:\n    tier: header X\n    tiers: {}\n    default_tier: f\n",
         "t.yaml:4: policies.a.tiers: no tiers"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        porteiro_config *cfg =
            porteiro_config_parse(cases[i].yaml, strlen(cases[i].yaml), "t.yaml", err, sizeof(err));
        if (cfg != NULL || strncmp(err, cases[i].error, strlen(cases[i].error)) != 0)
            print_error("case %zu: got [%s], want [%s...]\n", i, err, cases[i].error);
        assert_null(cfg);
        assert_memory_equal(err, cases[i].error, strlen(cases[i].error));
    }
    /* A good one: the default tier's limits are the policy's own (what a
     * caller that knows nothing of tiers checks), and choose picks. */
    const char *good =
        "policies:\n  a:\n    tier: header X-Plan\n    default_tier: f\n"
        "    tiers:\n      f: [gcra 1/1s]\n      p: 'gcra 9/1s burst 20, fixed_window 99/1d'\n"
        "    overrides:\n      vip: [gcra 50/1s]\n";
    char err[512] = "";
    porteiro_config *cfg = porteiro_config_parse(good, strlen(good), "t.yaml", err, sizeof(err));
    assert_non_null(cfg);
    const porteiro_policy *a = porteiro_config_policy(cfg, "a");
    assert_int_equal(a->nlimits, 1);
    assert_int_equal(a->limits[0].limit, 1);
    assert_string_equal(porteiro_config_tier_header(cfg, a), "X-Plan");
    porteiro_choice c;
    assert_int_equal(porteiro_config_choose(cfg, a, "p", "u", 1, &c), PORTEIRO_OK);
    assert_int_equal(c.by, PORTEIRO_CHOSEN_TIER);
    assert_string_equal(c.tier, "p");
    assert_int_equal(c.policy.nlimits, 2);
    assert_int_equal(c.policy.limits[1].limit, 99);
    assert_string_equal(c.policy.name, "a");
    porteiro_policy copy = *a; /* a copy is found by name */
    assert_int_equal(porteiro_config_choose(cfg, &copy, "", "vip", 3, &c), PORTEIRO_OK);
    assert_int_equal(c.by, PORTEIRO_CHOSEN_CONFIG_OVERRIDE);
    assert_string_equal(c.tier, "f");
    assert_int_equal(c.policy.limits[0].limit, 50);
    assert_int_equal(porteiro_config_choose(cfg, a, NULL, "vi", 2, &c), PORTEIRO_OK);
    assert_int_equal(c.by, PORTEIRO_CHOSEN_TIER);
    assert_int_equal(c.policy.limits[0].limit, 1);
    porteiro_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_rules),
        cmocka_unit_test(tiers_by_header),
        cmocka_unit_test(tier_change_keeps_usage),
        cmocka_unit_test(override_from_cli_seen_within_1s),
        cmocka_unit_test(no_redis_call_for_clients_without_override),
        cmocka_unit_test(bad_override_input_exits_2),
        cmocka_unit_test(cli_check_tier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
