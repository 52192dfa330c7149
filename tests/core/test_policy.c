/* test_policy.c — policies: a two-limit policy under concurrent callers
 * (threads and processes, fixed clock), refunds, shadow mode and the
 * per-policy on_error override, on both backends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "porteiro.h"
#include "redis_server.h"
#include "test_util.h"

/* 5 per second AND 20 per minute. */
static const porteiro_limit two[] = {{PORTEIRO_GCRA, 5, 1000, 0},
                                     {PORTEIRO_FIXED_WINDOW, 20, 60000, 0}};
#define MINUTE 6000000 /* a fixed-window start: 100 x 60 s */
#define ATTEMPTS 12

typedef struct worker {
    porteiro_t *p; /* shared (memory) or NULL: open its own Redis handle */
    int64_t now;
    int allowed;
    int errors;
} worker;

static int attempt_many(porteiro_t *p, int64_t now, int *errors) {
    int allowed = 0;
    for (int i = 0; i < ATTEMPTS; i++) {
        porteiro_request req = {.limits = two,
                                .nlimits = 2,
                                .key = "burst",
                                .key_len = 5,
                                .cost = 1,
                                .now_ms = now,
                                .max_wait_ms = 0};
        porteiro_decision d;
        if (porteiro_check_request(p, &req, &d) != PORTEIRO_OK ||
            d.fallback != PORTEIRO_FALLBACK_NONE)
            (*errors)++;
        else
            allowed += d.allowed;
    }
    return allowed;
}

/* For decisions, not time: a 2 s budget and connect time, so a loaded
 * machine (2 cores at load 10-35, under ASan) cannot turn an exact count
 * into errors (the library's default budget, 50 ms, did). */
static porteiro_t *open_deciding(const char *url) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = 2000;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    return p;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    porteiro_t *p = w->p != NULL ? w->p : open_deciding(group_redis.url);
    w->allowed = attempt_many(p, w->now, &w->errors);
    if (w->p == NULL)
        porteiro_free(p);
    return NULL;
}

/* 4 threads x 12 attempts at one instant: exactly 5 pass. */
static int burst_threads(porteiro_t *shared, int64_t now) {
    enum { T = 4 };
    pthread_t th[T];
    worker w[T];
    int total = 0;
    for (int i = 0; i < T; i++) {
        w[i] = (worker){shared, now, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].errors, 0);
        total += w[i].allowed;
    }
    return total;
}

/* 3 processes x 12 attempts: each reports its count as its exit status. */
static int burst_processes(int64_t now) {
    enum { N = 3 };
    pid_t pids[N];
    int total = 0;
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            porteiro_options o;
            porteiro_options_init(&o);
            o.redis_url = group_redis.url;
            o.on_error = PORTEIRO_ON_ERROR_ERROR;
            o.connect_timeout_ms = 2000; /* as open_deciding */
            o.command_timeout_ms = 2000;
            porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
            int errors = 0;
            int n = p != NULL ? attempt_many(p, now, &errors) : 0;
            porteiro_free(p);
            _exit(p == NULL || errors > 0 ? 100 : n);
        }
    }
    for (int i = 0; i < N; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        assert_true(WEXITSTATUS(status) <= ATTEMPTS);
        total += WEXITSTATUS(status);
    }
    return total;
}

/* The per-minute limit's remaining, read by a peek. */
static void expect_state(porteiro_t *p, int64_t now, int64_t per_second, int64_t per_minute) {
    porteiro_request req = {.limits = two,
                            .nlimits = 2,
                            .key = "burst",
                            .key_len = 5,
                            .cost = 0,
                            .now_ms = now,
                            .max_wait_ms = 0};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    assert_int_equal(d.limits[0].remaining, per_second);
    assert_int_equal(d.limits[1].remaining, per_minute);
}

/* Each second lets exactly 5 through; denials (by the per-second limit,
 * then by the per-minute one) consume nothing in the other limit. */
static void two_limits_concurrent(void **state) {
    (void)state;
    for (int backend = 0; backend < 3; backend++) {
        porteiro_t *p = open_deciding(backend == 0 ? NULL : group_redis.url);
        porteiro_t *shared = backend == 0 ? p : NULL;
        if (backend > 0)
            assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
        for (int s = 0; s < 5; s++) {
            int64_t now = MINUTE + 1000 * s;
            int passed = backend == 2 ? burst_processes(now) : burst_threads(shared, now);
            int want = s < 4 ? 5 : 0; /* 4 x 5 = 20 fills the minute */
            if (passed != want)
                fail_msg("backend %d second %d: %d passed, want %d", backend, s, passed, want);
            expect_state(p, now, s < 4 ? 0 : 5, 20 - 5 * (s < 4 ? s + 1 : 4));
        }
        porteiro_free(p);
    }
}

static void check_one(porteiro_t *p, const porteiro_limit *l, const char *key, int64_t now,
                      int64_t cost, int64_t remaining) {
    porteiro_request req = {.limits = l,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = cost,
                            .now_ms = now,
                            .max_wait_ms = 0};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, remaining);
}

static void refund_one(porteiro_t *p, const porteiro_limit *l, const char *key, int64_t now,
                       int64_t amount, int64_t remaining, int64_t reset) {
    porteiro_request req = {.limits = l,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = amount,
                            .now_ms = now,
                            .max_wait_ms = 0};
    porteiro_decision d;
    assert_int_equal(porteiro_refund(p, &req, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    if (d.remaining != remaining || d.reset_ms != reset)
        fail_msg("refund %s: remaining %lld reset %lld, want %lld %lld", key,
                 (long long)d.remaining, (long long)d.reset_ms, (long long)remaining,
                 (long long)reset);
}

static void refunds(void **state) {
    (void)state;
    const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 10, 60000, 0};
    const porteiro_limit tb = {PORTEIRO_TOKEN_BUCKET, 10, 1000, 0};
    const porteiro_limit gc = {PORTEIRO_GCRA, 10, 1000, 0};
    const porteiro_limit sw = {PORTEIRO_SLIDING_WINDOW, 10, 1000, 0};
    const porteiro_limit sl = {PORTEIRO_SLIDING_LOG, 3, 10000, 0};
    const int64_t t = 6000000;
    for (int redis = 0; redis <= 1; redis++) {
        porteiro_t *p = open_deciding(redis ? group_redis.url : NULL);
        check_one(p, &fw, "fw", t, 4, 6);
        refund_one(p, &fw, "fw", t + 10, 3, 9, 59990);
        refund_one(p, &fw, "fw", t + 10, 5, 10, 0); /* never above L */
        check_one(p, &fw, "fw", t + 20, 10, 0);
        refund_one(p, &fw, "fw", t + 60000, 5, 10, 0); /* window over: no-op */

        /* A clock that went back: the stored window stays the current one. */
        const porteiro_limit fw1 = {PORTEIRO_FIXED_WINDOW, 10, 1000, 0};
        check_one(p, &fw1, "fwb", 5500, 4, 6);
        refund_one(p, &fw1, "fwb", 4900, 2, 8, 1100);

        check_one(p, &tb, "tb", t, 6, 4);
        refund_one(p, &tb, "tb", t, 2, 6, 400);
        refund_one(p, &tb, "tb", t, 100, 10, 0); /* capped at B */

        check_one(p, &gc, "gc", t, 3, 7);
        refund_one(p, &gc, "gc", t, 1, 8, 200);
        refund_one(p, &gc, "gc", t, 9, 10, 0);        /* not before now */
        refund_one(p, &gc, "gc", t + 5000, 1, 10, 0); /* TAT in the past: no-op */

        check_one(p, &sw, "sw", t + 500, 4, 6);
        refund_one(p, &sw, "sw", t + 500, 2, 8, 1500);
        refund_one(p, &sw, "sw", t + 1500, 1, 9, 500); /* from the previous window: 10 - 1 x 0.5 */

        check_one(p, &sl, "sl", t, 2, 1);
        check_one(p, &sl, "sl", t + 1000, 1, 0);
        refund_one(p, &sl, "sl", t + 1000, 1, 1, 9000); /* the newest unit goes */
        check_one(p, &sl, "sl", t + 2000, 1, 0);
        refund_one(p, &sl, "sl", t + 2000, 50, 3, 0); /* all of them, no more */
        refund_one(p, &sl, "sl", t + 2000, 1, 3, 0);  /* empty: no-op */

        porteiro_request zero = {.limits = &fw,
                                 .nlimits = 1,
                                 .key = "fw",
                                 .key_len = 2,
                                 .cost = 0,
                                 .now_ms = t,
                                 .max_wait_ms = 0};
        porteiro_decision d;
        assert_int_equal(porteiro_refund(p, &zero, &d), PORTEIRO_ERR_INVALID);
        porteiro_free(p);
    }
    /* A refund that drops everything leaves no Redis key behind. */
    char out[32];
    assert_int_equal(
        test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS porteiro:{sl}:sl:10000"), 0);
    assert_string_equal(out, "0");
}

static porteiro_policy make_policy(bool shadow) {
    porteiro_policy pol;
    memset(&pol, 0, sizeof(pol));
    pol.name = "api";
    pol.limits[0] = (porteiro_limit){PORTEIRO_FIXED_WINDOW, 2, 60000, 0};
    pol.limits[1] = (porteiro_limit){PORTEIRO_TOKEN_BUCKET, 10, 1000, 0};
    pol.nlimits = 2;
    pol.shadow = shadow;
    return pol;
}

/* Shadow: the third check would be denied; it is allowed, reported, counted
 * as a denial, and consumes nothing. */
static void shadow_mode(void **state) {
    (void)state;
    for (int redis = 0; redis <= 1; redis++) {
        porteiro_t *p = open_deciding(redis ? group_redis.url : NULL);
        porteiro_policy shadow = make_policy(true), real = make_policy(false);
        porteiro_decision d;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(
                porteiro_check_request(
                    p,
                    &(porteiro_request){
                        .policy = &shadow, .key = "s", .key_len = 1, .cost = 1, .now_ms = 600000},
                    &d),
                PORTEIRO_OK);
            assert_true(d.allowed);
            assert_false(d.shadow_denied);
        }
        assert_int_equal(
            porteiro_check_request(
                p,
                &(porteiro_request){
                    .policy = &shadow, .key = "s", .key_len = 1, .cost = 1, .now_ms = 600000},
                &d),
            PORTEIRO_OK);
        assert_true(d.allowed);
        assert_true(d.shadow_denied);
        assert_int_equal(d.denied_by, 0);
        assert_false(d.limits[0].allowed);
        assert_int_equal(d.retry_after_ms, 0);
        assert_int_equal(d.limits[1].remaining, 8); /* nothing consumed */
        porteiro_stats s;
        porteiro_stats_get(p, &s);
        assert_int_equal(s.denied, 1);
        /* The same limits without shadow: denied. */
        assert_int_equal(
            porteiro_check_request(
                p,
                &(porteiro_request){
                    .policy = &real, .key = "s", .key_len = 1, .cost = 1, .now_ms = 600000},
                &d),
            PORTEIRO_OK);
        assert_false(d.allowed);
        assert_false(d.shadow_denied);
        assert_int_equal(d.retry_after_ms, 60000);
        porteiro_free(p);
    }
}

/* The policy's on_error wins over the handle's when Redis is down. */
static void policy_on_error(void **state) {
    (void)state;
    porteiro_t *p = tu_open_mode("redis://127.0.0.1:1", PORTEIRO_ON_ERROR_OPEN);
    porteiro_policy pol = make_policy(false);
    porteiro_decision d;
    assert_int_equal(
        porteiro_check_request(
            p,
            &(porteiro_request){
                .policy = &pol, .key = "k", .key_len = 1, .cost = 1, .now_ms = PORTEIRO_NOW},
            &d),
        PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_OPEN);
    pol.has_on_error = true;
    pol.on_error = PORTEIRO_ON_ERROR_CLOSED;
    assert_int_equal(
        porteiro_check_request(
            p,
            &(porteiro_request){
                .policy = &pol, .key = "k", .key_len = 1, .cost = 1, .now_ms = PORTEIRO_NOW},
            &d),
        PORTEIRO_OK);
    assert_false(d.allowed);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_CLOSED);
    pol.on_error = PORTEIRO_ON_ERROR_ERROR;
    assert_int_not_equal(
        porteiro_check_request(
            p,
            &(porteiro_request){
                .policy = &pol, .key = "k", .key_len = 1, .cost = 1, .now_ms = PORTEIRO_NOW},
            &d),
        PORTEIRO_OK);
    pol.on_error = (porteiro_on_error)9;
    assert_int_equal(
        porteiro_check_request(
            p,
            &(porteiro_request){
                .policy = &pol, .key = "k", .key_len = 1, .cost = 1, .now_ms = PORTEIRO_NOW},
            &d),
        PORTEIRO_ERR_INVALID);
    assert_int_equal(
        porteiro_check_request(
            p,
            &(porteiro_request){
                .policy = NULL, .key = "k", .key_len = 1, .cost = 1, .now_ms = PORTEIRO_NOW},
            &d),
        PORTEIRO_ERR_INVALID);
    porteiro_free(p);
}

/* Two policies with the same limits never share a client's counter: each
 * one's checks, refunds and resets name it (the Redis key holds the name
 * as an item's tag); a nameless policy counts as a plain check of its
 * limits. On main before this, "login" was denied after two checks of
 * "api" for the same key. */
/* A check of policy pol for key "k". */
static porteiro_status pol_check(porteiro_t *p, const porteiro_policy *pol, int64_t cost,
                                 int64_t now, porteiro_decision *d) {
    porteiro_request req = {.policy = pol, .key = "k", .key_len = 1, .cost = cost, .now_ms = now};
    return porteiro_check_request(p, &req, d);
}

static void policies_count_apart(void **state) {
    (void)state;
    for (int redis = 0; redis <= 1; redis++) {
        porteiro_t *p = open_deciding(redis ? group_redis.url : NULL);
        porteiro_policy api = make_policy(false), login = make_policy(false),
                        nameless = make_policy(false);
        login.name = "login";
        nameless.name = NULL;
        porteiro_decision d;
        const int64_t t = 1200000; /* explicit time: no window edge */
        for (int i = 0; i < 2; i++) {
            assert_int_equal(pol_check(p, &api, 1, t, &d), PORTEIRO_OK);
            assert_true(d.allowed);
        }
        assert_int_equal(pol_check(p, &api, 1, t, &d), PORTEIRO_OK);
        assert_false(d.allowed);
        /* login: the same key, the same limits, a counter of its own */
        assert_int_equal(pol_check(p, &login, 1, t, &d), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(d.limits[0].remaining, 1);
        /* the plain check of the same limits, and the nameless policy: one
         * counter, neither api's nor login's */
        porteiro_request plain = {.limits = api.limits,
                                  .nlimits = api.nlimits,
                                  .key = "k",
                                  .key_len = 1,
                                  .cost = 1,
                                  .now_ms = t,
                                  .max_wait_ms = 0};
        assert_int_equal(porteiro_check_request(p, &plain, &d), PORTEIRO_OK);
        assert_int_equal(d.limits[0].remaining, 1);
        assert_int_equal(pol_check(p, &nameless, 1, t, &d), PORTEIRO_OK);
        assert_int_equal(d.limits[0].remaining, 0);
        /* a refund of api gives api's unit back, login's stays spent */
        porteiro_request api_k = {.policy = &api, .key = "k", .key_len = 1, .cost = 1, .now_ms = t};
        assert_int_equal(porteiro_refund(p, &api_k, &d), PORTEIRO_OK);
        assert_int_equal(d.limits[0].remaining, 1);
        assert_int_equal(pol_check(p, &login, 0, t, &d), PORTEIRO_OK);
        assert_int_equal(d.limits[0].remaining, 1);
        /* a reset of login leaves api's count */
        porteiro_request login_k = {.policy = &login, .key = "k", .key_len = 1};
        assert_int_equal(porteiro_reset(p, &login_k), PORTEIRO_OK);
        assert_int_equal(pol_check(p, &login, 0, PORTEIRO_NOW, &d), PORTEIRO_OK);
        assert_int_equal(d.limits[0].remaining, 2);
        assert_int_equal(pol_check(p, &api, 0, t, &d), PORTEIRO_OK);
        assert_int_equal(d.limits[0].remaining, 1);
        /* neither limits nor a policy */
        porteiro_request none = {.key = "k", .key_len = 1, .cost = 1, .now_ms = t};
        assert_int_equal(porteiro_refund(p, &none, &d), PORTEIRO_ERR_INVALID);
        assert_int_equal(porteiro_reset(p, &none), PORTEIRO_ERR_INVALID);
        if (redis) { /* the name is in the key, as an item's tag */
            char out[4096];
            assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "EVAL %s 0 %s",
                                            "return table.concat(redis.call('KEYS', ARGV[1]), ' ')",
                                            "*:{k}=*"),
                             0);
            assert_non_null(strstr(out, "{k}=5:login:fw:60000"));
            assert_non_null(strstr(out, "{k}=3:api:fw:60000"));
        }
        porteiro_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policies_count_apart),
        cmocka_unit_test(two_limits_concurrent),
        cmocka_unit_test(refunds),
        cmocka_unit_test(shadow_mode),
        cmocka_unit_test(policy_on_error),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
