/* test_daemon_settle.c — porteirod's POST /v1/settle (issue 38): a check
 * sent to /v1/check with an estimate, settled with the units it used. The
 * difference is given back or charged (debt: the next checks are denied
 * until it is repaid), per policy in /metrics; bad bodies are 400 with
 * nothing changed; with Redis down the policy's on_error decides. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "redis_server.h"

/* A day's bucket: its refill (1000 per 86 400 s) adds no unit in a test. */
static const char *const CONFIG = "listen: 127.0.0.1:%PORT%\n"
                                  "policies:\n"
                                  "  tpm:\n"
                                  "    limits:\n"
                                  "      - token_bucket 1000/1d\n"
                                  "    key: header X-Api-Key\n"
                                  "  open:\n"
                                  "    limits:\n"
                                  "      - token_bucket 1000/1d\n"
                                  "    on_error: open\n"
                                  "  strict:\n"
                                  "    limits:\n"
                                  "      - token_bucket 1000/1d\n"
                                  "    on_error: error\n"
                                  "  logged:\n"
                                  "    limits:\n"
                                  "      - sliding_log 100/1m\n";

static void post(const test_daemon *d, const char *path, const char *body, http_response *r) {
    assert_int_equal(
        http_request(d->port, "POST", path, "Content-Type: application/json\r\n", body, r), 0);
}

/* The integer after "name": in a JSON body, or -1. */
static long long json_int(const http_response *r, const char *name) {
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", name);
    const char *at = strstr(r->body, pat);
    return at != NULL ? strtoll(at + strlen(pat), NULL, 10) : -1;
}

static long long remaining(const test_daemon *d, const char *policy, const char *key) {
    char body[256];
    http_response r;
    snprintf(body, sizeof(body), "{\"policy\":\"%s\",\"key\":\"%s\",\"cost\":0}", policy, key);
    post(d, "/v1/check", body, &r);
    assert_int_equal(r.status, 200);
    return json_int(&r, "remaining");
}

static void start(test_redis *redis, test_daemon *d) {
    assert_int_equal(test_redis_start(redis, NULL), 0);
    char yaml[2048];
    snprintf(yaml, sizeof(yaml), "%sredis:\n  url: %s\n", CONFIG, redis->url);
    test_daemon_must_start(d, yaml, NULL);
}

static void give_back_charge_and_debt(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    start(&redis, &d);
    http_response r;
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":100}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "remaining"), 900);
    /* Used 30 of the 100: 70 back. */
    post(&d, "/v1/settle",
         "{\"policy\":\"tpm\",\"key\":\"k1\",\"estimate\":100,\"used\":30,\"age_ms\":5}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "remaining"), 970);
    assert_int_equal(json_int(&r, "debt"), 0);
    assert_int_equal(json_int(&r, "used"), 30);
    char buf[256];
    assert_non_null(http_header(&r, "RateLimit", buf, sizeof(buf)));
    /* Another check of 100 (870 left) that used 1500: 530 past empty. */
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":100}", &r);
    assert_int_equal(json_int(&r, "remaining"), 870);
    post(&d, "/v1/settle", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":100,\"used\":1500}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "remaining"), 0);
    assert_int_equal(json_int(&r, "debt"), 530);
    assert_int_equal(json_int(&r, "debt_added"), 530);
    /* The debt denies the next checks, even of 1 unit. */
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":1}", &r);
    assert_int_equal(r.status, 429);
    assert_true(json_int(&r, "retry_after_ms") > 86400000LL / 2); /* 531 / 1000 of a day */
    /* Another key is not touched. */
    assert_int_equal(remaining(&d, "tpm", "k2"), 1000);
    /* Per policy in /metrics. */
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(strstr(r.body, "porteiro_debt_units_total{policy=\"tpm\"} 530\n"));
    assert_non_null(strstr(r.body, "porteiro_settles_total{policy=\"tpm\",outcome=\"ok\"} 2\n"));
    assert_non_null(
        strstr(r.body, "porteiro_settle_units_total{policy=\"tpm\",direction=\"returned\"} 70\n"));
    assert_non_null(
        strstr(r.body, "porteiro_settle_units_total{policy=\"tpm\",direction=\"charged\"} 1400\n"));
    assert_non_null(strstr(r.body, "porteiro_settles_in_debt_total{policy=\"tpm\"} 1\n"));
    /* A settle is no decision: the check counters did not see it. */
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"tpm\",outcome=\"allowed\"} 3\n"));
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

static void bad_bodies_change_nothing(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    start(&redis, &d);
    http_response r;
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k\",\"cost\":10}", &r);
    assert_int_equal(r.status, 200);
    static const struct {
        const char *body;
        int status;
        const char *says;
    } bad[] = {
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":-1}", 400, "used\\\" must"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":1000000001}", 400,
         "used\\\" must"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":1e30}", 400, "used\\\" must"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":99999999999999999999999}", 400,
         "JSON"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":\"5\"}", 400, "used\\\" must"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":-10,\"used\":5}", 400,
         "estimate\\\" must"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10}", 400, "used\\\" is missing"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"used\":10}", 400, "estimate\\\" is missing"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"cost\":10,\"used\":1}", 400,
         "not both"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":1,\"age_ms\":-5}", 400,
         "age_ms\\\" must"},
        {"{\"policy\":\"tpm\",\"key\":\"k\",\"estimate\":10,\"used\":1,\"extra\":1}", 400,
         "unknown field"},
        {"{\"policy\":\"tpm\",\"estimate\":10,\"used\":1}", 400, "key\\\" is missing"},
        {"{\"policy\":\"nope\",\"key\":\"k\",\"estimate\":10,\"used\":1}", 404, "unknown policy"},
        {"{\"policy\":\"logged\",\"key\":\"k\",\"estimate\":10,\"used\":1}", 400, "sliding_log"},
        {"[1,2]", 400, "object"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        post(&d, "/v1/settle", bad[i].body, &r);
        if (r.status != bad[i].status || strstr(r.body, bad[i].says) == NULL)
            fail_msg("%s: %d %s", bad[i].body, r.status, r.body);
    }
    assert_int_equal(http_request(d.port, "GET", "/v1/settle", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 405);
    assert_int_equal(remaining(&d, "tpm", "k"), 990);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

/* Redis gone between the check and the settle: on_error open answers a
 * settle that was not applied (fallback), error a 503. */
static void redis_down_follows_on_error(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    start(&redis, &d);
    http_response r;
    post(&d, "/v1/check", "{\"policy\":\"open\",\"key\":\"k\",\"cost\":10}", &r);
    assert_int_equal(r.status, 200);
    test_redis_kill9(&redis);
    post(&d, "/v1/settle", "{\"policy\":\"open\",\"key\":\"k\",\"estimate\":10,\"used\":500}", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"fallback\":\"open\""));
    assert_int_equal(json_int(&r, "debt"), 0);
    post(&d, "/v1/settle", "{\"policy\":\"strict\",\"key\":\"k\",\"estimate\":10,\"used\":500}",
         &r);
    assert_int_equal(r.status, 503);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(
        strstr(r.body, "porteiro_settles_total{policy=\"strict\",outcome=\"error\"} 1\n"));
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

/* The memory backend settles the same way. */
static void memory_backend(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    http_response r;
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"m\",\"cost\":50}", &r);
    post(&d, "/v1/settle", "{\"policy\":\"tpm\",\"key\":\"m\",\"estimate\":50,\"used\":1200}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "debt"), 200);
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"m\",\"cost\":1}", &r);
    assert_int_equal(r.status, 429);
    test_daemon_must_finish(&d);
}

/* examples/llm/porteirod.yaml as written, its listen address and Redis
 * moved to this test's: a check with an estimate, a settle with the usage,
 * and the key denied while in debt. */
static void the_llm_example_runs_as_written(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char path[512], text[8192], yaml[9000];
    snprintf(path, sizeof(path), "%s/examples/llm/porteirod.yaml", getenv("PORTEIRO_SOURCE_DIR"));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    const char *listen = strstr(text, "listen: 127.0.0.1:8080\n");
    const char *url = strstr(text, "url: redis://127.0.0.1:6379/0\n");
    assert_non_null(listen);
    assert_non_null(url);
    assert_true(listen < url);
    snprintf(yaml, sizeof(yaml), "%.*slisten: 127.0.0.1:%%PORT%%\n%.*surl: %s/0\n%s",
             (int)(listen - text), text, (int)(url - listen - strlen("listen: 127.0.0.1:8080\n")),
             listen + strlen("listen: 127.0.0.1:8080\n"), redis.url,
             url + strlen("url: redis://127.0.0.1:6379/0\n"));
    test_daemon d;
    test_daemon_must_start(&d, yaml, NULL);
    http_response r;
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":500}", &r);
    assert_int_equal(r.status, 200);
    post(&d, "/v1/settle",
         "{\"policy\":\"tpm\",\"key\":\"k1\",\"estimate\":500,\"used\":1200,\"age_ms\":800}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "debt"), 0);
    long long left = json_int(&r, "remaining");
    assert_true(left >= 18800 && left < 18900); /* 20 000 - 1200, and a few ms of refill */
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":500}", &r);
    post(&d, "/v1/settle", "{\"policy\":\"tpm\",\"key\":\"k1\",\"estimate\":500,\"used\":50000}",
         &r);
    assert_int_equal(r.status, 200);
    assert_true(json_int(&r, "debt") > 31000);
    post(&d, "/v1/check", "{\"policy\":\"tpm\",\"key\":\"k1\",\"cost\":1}", &r);
    assert_int_equal(r.status, 429);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

/* A key of any length settles as it checks (issue 33: no key a client
 * sends is an error): a 10 000-byte key checked, then settled with a give
 * back, its own state and no other. */
static void long_keys_settle(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    start(&redis, &d);
    enum { KEY = 10000 };
    char *body = malloc(KEY + 256);
    assert_non_null(body);
    int n = snprintf(body, KEY + 256, "{\"policy\":\"tpm\",\"key\":\"");
    memset(body + n, 'k', KEY);
    n += KEY;
    http_response r;
    snprintf(body + n, 256, "\",\"cost\":100}");
    post(&d, "/v1/check", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "remaining"), 900);
    snprintf(body + n, 256, "\",\"estimate\":100,\"used\":40}");
    post(&d, "/v1/settle", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r, "remaining"), 960);
    assert_int_equal(remaining(&d, "tpm", "kkkk"), 1000);
    free(body);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

/* The admin listener (issue 38, observability): /v1/top?outcome=used ranks
 * the keys by the units their settles reported (tokens, not requests: the
 * estimates stay in outcome=allowed), and /v1/status carries each policy's
 * settles and debt (what the live page shows). */
static void admin_top_used_and_status_debt(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    int admin = test_free_port();
    char yaml[2048];
    snprintf(yaml, sizeof(yaml), "%sadmin:\n  listen: 127.0.0.1:%d\nredis:\n  url: %s\n", CONFIG,
             admin, redis.url);
    test_daemon_must_start(&d, yaml, NULL);
    http_response r;
    for (int i = 0; i < 100 && http_request(admin, "GET", "/healthz", NULL, NULL, &r) != 0; i++)
        test_sleep_ms(20);
    static const struct {
        const char *key;
        int used;
    } runs[] = {{"light", 40}, {"heavy", 900}, {"light", 40}, {"heavy", 900}, {"mid", 300}};
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"policy\":\"tpm\",\"key\":\"%s\",\"cost\":100}",
                 runs[i].key);
        post(&d, "/v1/check", body, &r);
        assert_int_equal(r.status, 200);
        snprintf(body, sizeof(body),
                 "{\"policy\":\"tpm\",\"key\":\"%s\",\"estimate\":100,\"used\":%d}", runs[i].key,
                 runs[i].used);
        post(&d, "/v1/settle", body, &r);
        assert_int_equal(r.status, 200);
    }
    assert_int_equal(http_request(admin, "GET", "/v1/top?policy=tpm&outcome=used", NULL, NULL, &r),
                     0);
    assert_int_equal(r.status, 200);
    if (strstr(r.body, "\"outcome\":\"used\"") == NULL ||
        strstr(r.body, "\"total\":2180,") == NULL ||
        strstr(r.body, "\"keys\":[{\"key\":\"heavy\",\"count\":1800,\"error\":0},"
                       "{\"key\":\"mid\",\"count\":300,\"error\":0},"
                       "{\"key\":\"light\",\"count\":80,\"error\":0}]") == NULL)
        fail_msg("/v1/top?outcome=used: %s", r.body);
    /* The estimates: 5 checks of 100, light first (it checked first). */
    assert_int_equal(
        http_request(admin, "GET", "/v1/top?policy=tpm&outcome=allowed", NULL, NULL, &r), 0);
    if (strstr(r.body, "\"total\":500,") == NULL)
        fail_msg("/v1/top?outcome=allowed: %s", r.body);
    assert_int_equal(http_request(admin, "GET", "/v1/top?outcome=tokens", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "expected denied, allowed or used"));
    /* heavy: 100 + 800 charged, twice: 800 past empty the second time. */
    assert_int_equal(http_request(admin, "GET", "/v1/status", NULL, NULL, &r), 0);
    const char *tpm = strstr(r.body, "{\"policy\":\"tpm\"");
    assert_non_null(tpm);
    if (strstr(tpm, "\"settles\":5,\"settle_errors\":0,\"settle_charged\":1800,"
                    "\"settle_returned\":120,\"debt_units\":") == NULL)
        fail_msg("/v1/status: %s", r.body);
    long long debt = strtoll(strstr(tpm, "\"debt_units\":") + 13, NULL, 10);
    char metric[128];
    snprintf(metric, sizeof(metric), "porteiro_debt_units_total{policy=\"tpm\"} %lld\n", debt);
    assert_true(debt > 0);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    if (strstr(r.body, metric) == NULL)
        fail_msg("/metrics lacks %s", metric);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(give_back_charge_and_debt),
        cmocka_unit_test(bad_bodies_change_nothing),
        cmocka_unit_test(redis_down_follows_on_error),
        cmocka_unit_test(memory_backend),
        cmocka_unit_test(the_llm_example_runs_as_written),
        cmocka_unit_test(long_keys_settle),
        cmocka_unit_test(admin_top_used_and_status_debt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
