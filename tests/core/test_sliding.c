/* test_sliding.c — sliding_window and sliding_log: one scenario table, run
 * on the memory backend and on a real redis-server (the C core and the Lua
 * script must give the same numbers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "redis_server.h"

typedef struct row {
    int64_t now_ms, cost;
    bool allowed;
    int64_t remaining, reset_ms, retry_ms;
} row;

static porteiro_t *open_backend(int redis) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = redis ? group_redis.url : NULL;
    o.on_error = PORTEIRO_ON_ERROR_ERROR; /* a Redis failure must fail the test */
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static void expect(porteiro_t *p, const porteiro_limit *l, const char *key, const row *r,
                   const char *where, size_t i) {
    porteiro_request req = {.limits = l,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = r->cost,
                            .now_ms = r->now_ms,
                            .max_wait_ms = 0};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    if (d.allowed != r->allowed || d.remaining != r->remaining || d.reset_ms != r->reset_ms ||
        d.retry_after_ms != r->retry_ms) {
        print_error("%s row %zu (now %lld cost %lld): got allowed %d remaining %lld reset %lld "
                    "retry %lld, want %d %lld %lld %lld\n",
                    where, i, (long long)r->now_ms, (long long)r->cost, d.allowed,
                    (long long)d.remaining, (long long)d.reset_ms, (long long)d.retry_after_ms,
                    r->allowed, (long long)r->remaining, (long long)r->reset_ms,
                    (long long)r->retry_ms);
        fail();
    }
}

static void run_rows(const porteiro_limit *l, const row *rows, size_t n, const char *name) {
    for (int redis = 0; redis <= 1; redis++) {
        porteiro_t *p = open_backend(redis);
        for (size_t i = 0; i < n; i++)
            expect(p, l, name, &rows[i], redis ? "redis" : "memory", i);
        porteiro_free(p);
    }
}

/* docs/algorithms.md, "Sliding window counter": L = 50 per minute, 42 in
 * the previous minute, 15 s into this one: 18 checks pass, the 19th is
 * denied (retry exact to the ms). */
static void sliding_window_example(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_SLIDING_WINDOW, 50, 60000, 0};
    const int64_t w = 60000000; /* a window start: 1000 x P */
    row rows[22];
    size_t n = 0;
    rows[n++] = (row){w - 50000, 42, true, 8, 110000, 0};
    /* estimate = 42 x 45/60 = 31.5: remaining floor(18.5 - k) after k more. */
    rows[n++] = (row){w + 15000, 0, true, 18, 45000, 0};
    for (int64_t k = 1; k <= 18; k++)
        rows[n++] = (row){w + 15000, 1, true, 18 - k, 105000, 0};
    /* 42 x (60000 - e) + 19 x 60000 <= 50 x 60000 first holds at e = 15715. */
    rows[n++] = (row){w + 15000, 1, false, 0, 105000, 715};
    rows[n++] = (row){w + 15715, 1, true, 0, 104285, 0};
    run_rows(&l, rows, n, "sw-example");
}

/* Window edges, a cost that never fits, and the next window. */
static void sliding_window_edges(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_SLIDING_WINDOW, 10, 1000, 0};
    const row rows[] = {
        {5000, 0, true, 10, 0, 0},    /* fresh key: a peek */
        {5000, 11, false, 10, 0, -1}, /* more than L: never */
        {5000, 10, true, 0, 2000, 0},
        {5999, 1, false, 0, 1001, 101}, /* fits in the next window, at e = 100 */
        {6000, 1, false, 0, 1000, 100}, /* 10 x (1000 - e) + 1000 <= 10000 at e = 100 */
        {6100, 1, true, 0, 1900, 0},
        {6500, 0, true, 4, 1500, 0}, /* 10 x 0.5 + 1 = 6 */
        {8000, 0, true, 10, 0, 0},   /* two windows later: all gone */
    };
    run_rows(&l, rows, sizeof(rows) / sizeof(rows[0]), "sw-edges");
}

/* The exact log, L = 3 per 10 s: retry_after is when enough entries left. */
static void sliding_log_table(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_SLIDING_LOG, 3, 10000, 0};
    const int64_t t = 1000000;
    const row rows[] = {
        {t, 0, true, 3, 0, 0},
        {t, 1, true, 2, 10000, 0},
        {t + 1000, 1, true, 1, 10000, 0},
        {t + 2000, 2, false, 1, 9000, 8000}, /* 1 unit must leave: the one at t */
        {t + 2000, 1, true, 0, 10000, 0},
        {t + 5000, 0, true, 0, 7000, 0},
        {t + 5000, 1, false, 0, 7000, 5000},
        {t + 5000, 3, false, 0, 7000, 7000}, /* all three: the newest at t + 2000 */
        {t + 5000, 4, false, 0, 7000, -1},   /* more than L: never */
        {t + 9999, 1, false, 0, 2001, 1},    /* the entry at t counts while t > now - P */
        {t + 10000, 1, true, 0, 10000, 0},
        {t + 10000, 1, false, 0, 10000, 1000},
        {t + 30000, 3, true, 0, 10000, 0}, /* one check of cost 3 */
        {t + 35000, 2, false, 0, 5000, 5000},
        {t + 29000, 1, false, 0, 11000, 11000}, /* a clock that went back */
        {t + 40000, 0, true, 3, 0, 0},
    };
    run_rows(&l, rows, sizeof(rows) / sizeof(rows[0]), "sl-table");
}

/* L above the documented bound is refused: memory is O(L) per key. */
static void sliding_log_bound(void **state) {
    (void)state;
    porteiro_limit ok = {PORTEIRO_SLIDING_LOG, 1000, 1000, 0};
    porteiro_limit big = {PORTEIRO_SLIDING_LOG, 1001, 1000, 0};
    char err[128];
    assert_int_equal(porteiro_limit_validate(&ok, err, sizeof(err)), PORTEIRO_OK);
    assert_int_equal(porteiro_limit_validate(&big, err, sizeof(err)), PORTEIRO_ERR_INVALID);
    assert_string_equal(err,
                        "sliding_log: limit must be at most 1000 (its state is O(limit) per key)");
    porteiro_limit parsed;
    assert_int_equal(porteiro_parse_limit("sliding_log 2000/1m", &parsed, err, sizeof(err)),
                     PORTEIRO_ERR_INVALID);
}

/* A log of L = 1000 filled by large checks: the Redis key holds one member
 * per live unit, expires with the window, and both backends agree. */
static void sliding_log_large(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_SLIDING_LOG, 1000, 60000, 0};
    const row rows[] = {
        {1000, 900, true, 100, 60000, 0},
        {2000, 100, true, 0, 60000, 0},
        {3000, 1, false, 0, 59000, 58000},
        {61000, 1, true, 899, 60000, 0}, /* the 900 at t = 1000 left */
    };
    run_rows(&l, rows, sizeof(rows) / sizeof(rows[0]), "sl-large");
    char out[64];
    assert_int_equal(
        test_redis_cmd(&group_redis, out, sizeof(out), "ZCARD porteiro:{sl-large}:sl:60000"), 0);
    assert_string_equal(out, "101");
    assert_int_equal(
        test_redis_cmd(&group_redis, out, sizeof(out), "PTTL porteiro:{sl-large}:sl:60000"), 0);
    long long ttl = atoll(out);
    assert_true(ttl > 0 && ttl <= 60000);
}

/* Two limits in one policy: a denial in the log consumes nothing in the
 * window counter, on both backends. */
static void sliding_policy_all_or_nothing(void **state) {
    (void)state;
    const porteiro_limit ls[] = {{PORTEIRO_SLIDING_WINDOW, 10, 1000, 0},
                                 {PORTEIRO_SLIDING_LOG, 2, 1000, 0}};
    for (int redis = 0; redis <= 1; redis++) {
        porteiro_t *p = open_backend(redis);
        porteiro_request req = {.limits = ls,
                                .nlimits = 2,
                                .key = "pol",
                                .key_len = 3,
                                .cost = 1,
                                .now_ms = 500,
                                .max_wait_ms = 0};
        porteiro_decision d;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
            assert_true(d.allowed);
        }
        assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
        assert_false(d.allowed);
        assert_int_equal(d.denied_by, 1);
        assert_int_equal(d.limits[0].remaining, 8); /* not 7: nothing consumed */
        assert_int_equal(d.limits[1].retry_after_ms, 1000);
        porteiro_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sliding_window_example), cmocka_unit_test(sliding_window_edges),
        cmocka_unit_test(sliding_log_table),      cmocka_unit_test(sliding_log_bound),
        cmocka_unit_test(sliding_log_large),      cmocka_unit_test(sliding_policy_all_or_nothing),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
