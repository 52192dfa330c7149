/* test_limit_change.c — a changed limit keeps what each client used.
 *
 * Keys name the client, the algorithm and the period, never L or B
 * (docs/algorithms.md, "What a change of limit keeps"), so an operator who
 * raises or lowers a limit does not hand every client a fresh quota. Each
 * row below checks one client key under the limit of that row, with the
 * clock injected; the same rows run on the memory backend and on a real
 * redis-server, and must give the same answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#define FW PORTEIRO_FIXED_WINDOW
#define TB PORTEIRO_TOKEN_BUCKET
#define GC PORTEIRO_GCRA
#define SW PORTEIRO_SLIDING_WINDOW
#define SL PORTEIRO_SLIDING_LOG

typedef struct row {
    const char *key;
    porteiro_limit limit;
    int64_t now_ms, cost;
    int allowed;
    int64_t remaining, reset_ms, retry_after_ms;
} row;

#define H 3600000 /* one hour, in ms */

static const row rows[] = {
    /* fixed_window 5/1h, 5 used, then 8/1h: 3 remain; then 4/1h: 0 remain,
     * retry at the window's end (10 800 000, 3 599 000 ms away). */
    {"fw", {FW, 5, H, 0}, 7201000, 5, 1, 0, 3599000, 0},
    {"fw", {FW, 5, H, 0}, 7201000, 1, 0, 0, 3599000, 3599000},
    {"fw", {FW, 8, H, 0}, 7201000, 0, 1, 3, 3599000, 0},
    {"fw", {FW, 4, H, 0}, 7201000, 1, 0, 0, 3599000, 3599000},
    {"fw", {FW, 4, H, 0}, 7201000, 0, 1, 0, 3599000, 0},  /* a peek always passes */
    {"fw", {FW, 4, H, 0}, 10800000, 1, 1, 3, 3600000, 0}, /* the next window */
    /* A new period is a new key: a fresh start (window 4 of 30 min). */
    {"fw", {FW, 5, H / 2, 0}, 7201000, 1, 1, 4, 1799000, 0},

    /* gcra 10/1s burst 10, 10 used at once, then burst 20: 10 remain at
     * once (the TAT, 1000 ms ahead, carries over). Back to burst 10: the
     * TAT is now 2000 ms ahead, so the next unit waits 1100 ms. */
    {"gc", {GC, 10, 1000, 10}, 5000000, 10, 1, 0, 1000, 0},
    {"gc", {GC, 10, 1000, 20}, 5000000, 0, 1, 10, 1000, 0},
    {"gc", {GC, 10, 1000, 20}, 5000000, 10, 1, 0, 2000, 0},
    {"gc", {GC, 10, 1000, 10}, 5000000, 1, 0, 0, 2000, 1100},
    {"gc", {GC, 10, 1000, 10}, 5001100, 1, 1, 0, 1000, 0},
    /* A new L: the TAT is time, so it carries as time. 4/1s: 250 ms
     * ahead; at 2/1s (T = 500 ms) with B = 4, 3 units still fit. */
    {"gc-l", {GC, 4, 1000, 4}, 6000000, 1, 1, 3, 250, 0},
    {"gc-l", {GC, 2, 1000, 4}, 6000000, 0, 1, 3, 250, 0},
    /* A TAT in thirds of a ms (3/1s: 333 1/3 ms) under a new L rounds up
     * to the next whole ms: 334 ms, 2004 ticks of 1/6 ms at 6/1s. */
    {"gc-r", {GC, 3, 1000, 3}, 6000000, 1, 1, 2, 334, 0},
    {"gc-r", {GC, 6, 1000, 6}, 6000000, 0, 1, 3, 334, 0},
    {"gc-r", {GC, 6, 1000, 6}, 6000000, 3, 1, 0, 834, 0},

    /* token_bucket keeps the units used (the same as gcra's TAT): 10 used,
     * burst 20 → 10 remain; burst 5 → 5 units in debt, one more unit waits
     * (1000 + 5000) / 10 = 600 ms. */
    {"tb", {TB, 10, 1000, 10}, 9000000, 10, 1, 0, 1000, 0},
    {"tb", {TB, 10, 1000, 20}, 9000000, 0, 1, 10, 1000, 0},
    {"tb", {TB, 10, 1000, 5}, 9000000, 1, 0, 0, 1000, 600},
    {"tb", {TB, 10, 1000, 5}, 9000000, 0, 1, 0, 1000, 0},
    {"tb", {TB, 10, 1000, 5}, 9000600, 1, 1, 0, 500, 0},
    /* A new algorithm on the same client and period starts fresh. */
    {"tb", {GC, 10, 1000, 5}, 9000600, 1, 1, 4, 100, 0},

    /* sliding_window 10/1m, 8 used: at 20/1m 12 remain; at 5/1m one more
     * is denied until half of the 8 weigh no more (next window + 30 s). */
    {"sw", {SW, 10, 60000, 0}, 600000, 8, 1, 2, 120000, 0},
    {"sw", {SW, 20, 60000, 0}, 600000, 0, 1, 12, 120000, 0},
    {"sw", {SW, 5, 60000, 0}, 600000, 1, 0, 0, 120000, 90000},

    /* sliding_log 5/10s, 3 used: at 4/10s 1 remains; at 2/10s a unit waits
     * until two have left (all three at t: 10 s). */
    {"sl", {SL, 5, 10000, 0}, 700000, 3, 1, 2, 10000, 0},
    {"sl", {SL, 4, 10000, 0}, 700000, 0, 1, 1, 10000, 0},
    {"sl", {SL, 2, 10000, 0}, 700000, 1, 0, 0, 10000, 10000},
};

/* Redis expires keys in real time while the rows use injected time: keep
 * every key until the rows are done. */
static void persist_all(redisContext *c, const char *prefix) {
    char pattern[64];
    tu_keys keys;
    snprintf(pattern, sizeof(pattern), "%s:*", prefix);
    tu_scan(c, pattern, &keys);
    for (size_t i = 0; i < keys.n; i++)
        tu_cmd_int(c, "PERSIST %b", keys.names[i], keys.lens[i]);
    tu_keys_free(&keys);
}

static void run_rows(porteiro_t *p, redisContext *c, const char *prefix, const char *backend) {
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const row *w = &rows[i];
        porteiro_request req = {.limits = &w->limit,
                                .nlimits = 1,
                                .key = w->key,
                                .key_len = strlen(w->key),
                                .cost = w->cost,
                                .now_ms = w->now_ms,
                                .max_wait_ms = 0};
        porteiro_decision d;
        TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "%s row %zu: %s", backend, i,
              porteiro_errmsg(p));
        TU_EQ(d.allowed, w->allowed, "%s row %zu", backend, i);
        TU_EQ(d.remaining, w->remaining, "%s row %zu", backend, i);
        TU_EQ(d.reset_ms, w->reset_ms, "%s row %zu", backend, i);
        TU_EQ(d.retry_after_ms, w->retry_after_ms, "%s row %zu", backend, i);
        if (c != NULL)
            persist_all(c, prefix);
    }
}

static void rows_on_memory(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "lc", 0);
    run_rows(p, NULL, "lc", "memory");
    porteiro_free(p);
}

static void rows_on_redis(void **state) {
    (void)state;
    porteiro_t *p = tu_open(group_redis.url, "lc", 0);
    redisContext *c = tu_redis(&group_redis);
    run_rows(p, c, "lc", "redis");
    redisFree(c);
    porteiro_free(p);
}

/* The key layout itself: prefix:{client}:tag:P, with no L or B in it. */
static void keys_name_algorithm_and_period(void **state) {
    (void)state;
    porteiro_t *p = tu_open(group_redis.url, "layout", 0);
    redisContext *c = tu_redis(&group_redis);
    const porteiro_limit limits[] = {
        {FW, 7, 60000, 0}, {TB, 7, 1000, 9}, {GC, 7, 1000, 9}, {SW, 7, 60000, 0}, {SL, 7, 5000, 0},
    };
    const char *const want[] = {"layout:{u}:fw:60000", "layout:{u}:tb:1000", "layout:{u}:gc:1000",
                                "layout:{u}:sw:60000", "layout:{u}:sl:5000"};
    porteiro_decision d;
    for (size_t i = 0; i < 5; i++) {
        TU_EQ(porteiro_check(p, &limits[i], "u", 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        TU_EQ(tu_cmd_int(c, "EXISTS %s", want[i]), 1, "%s", want[i]);
    }
    /* Two limits of one policy with one algorithm and period: two states. */
    const porteiro_limit twins[] = {{TB, 5, 3600000, 10}, {TB, 4, 3600000, 0}};
    porteiro_request req = {.limits = twins,
                            .nlimits = 2,
                            .key = "v",
                            .key_len = 1,
                            .cost = 3,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
    TU_EQ(d.limits[0].remaining, 7, "");
    TU_EQ(d.limits[1].remaining, 1, "");
    TU_EQ(tu_cmd_int(c, "EXISTS layout:{v}:tb:3600000"), 1, "");
    TU_EQ(tu_cmd_int(c, "EXISTS layout:{v}:tb:3600000:2"), 1, "");
    redisFree(c);
    porteiro_free(p);
}

/* The flat scripts answer an allowed check with one integer, remaining x
 * 2^32 + reset, when that fits in 53 bits, else with a table: both forms,
 * for every algorithm, give what the memory backend gives. */
static void large_values_reply_in_full(void **state) {
    (void)state;
    const int64_t day = 86400000, big = 1000000000;
    const porteiro_limit limits[] = {
        {FW, big, 60000, 0},   {FW, 5, 300 * day, 0}, /* remaining >= 2^21; reset >= 2^32 */
        {TB, big, 1000, 0},    {TB, 1, 100 * day, 3}, {GC, big, 1000, 0},
        {GC, 1, 100 * day, 3}, {SW, big, 60000, 0},   {SW, 5, 300 * day, 0},
    };
    porteiro_t *mem = tu_open(NULL, "big", 0), *red = tu_open(group_redis.url, "big", 0);
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        for (int64_t cost = 0; cost <= 2; cost++) {
            char key[16];
            snprintf(key, sizeof(key), "k%zu", i);
            porteiro_request req = {.limits = &limits[i],
                                    .nlimits = 1,
                                    .key = key,
                                    .key_len = strlen(key),
                                    .cost = cost,
                                    .now_ms = 400 * day + 12345,
                                    .max_wait_ms = 0};
            porteiro_decision a, b;
            TU_EQ(porteiro_check_request(mem, &req, &a), PORTEIRO_OK, "");
            TU_EQ(porteiro_check_request(red, &req, &b), PORTEIRO_OK, "%s", porteiro_errmsg(red));
            TU_EQ(b.allowed, a.allowed, "limit %zu cost %lld", i, (long long)cost);
            TU_EQ(b.remaining, a.remaining, "limit %zu cost %lld", i, (long long)cost);
            TU_EQ(b.reset_ms, a.reset_ms, "limit %zu cost %lld", i, (long long)cost);
            TU_EQ(b.retry_after_ms, a.retry_after_ms, "limit %zu cost %lld", i, (long long)cost);
            TU_EQ(b.limit, a.limit, "limit %zu", i);
        }
    }
    porteiro_free(mem);
    porteiro_free(red);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_on_memory),
        cmocka_unit_test(rows_on_redis),
        cmocka_unit_test(keys_name_algorithm_and_period),
        cmocka_unit_test(large_values_reply_in_full),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
