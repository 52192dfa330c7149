/* test_traps.c — the traps docs/algorithms.md names ("The trap it
 * avoids"), each as a test, on both backends: refill that loses fractions
 * (steady traffic starves), keys without a TTL or with one longer than the
 * state's life, a retry_after that is not enough, floating-point drift, and
 * the script cache being flushed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <time.h>

#include "test_util.h"

/* NULL: the memory backend; else the Redis URL. */
static const char *backend_url(int i) {
    return i == 0 ? NULL : group_redis.url;
}
static const char *backend_name(int i) {
    return i == 0 ? "memory" : "redis";
}

static porteiro_status check_at(porteiro_t *p, const porteiro_limit *limits, size_t n,
                                const char *key, int64_t cost, int64_t now, porteiro_decision *d) {
    porteiro_request req = {.limits = limits,
                            .nlimits = n,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = cost,
                            .now_ms = now,
                            .max_wait_ms = 0};
    return porteiro_check_request(p, &req, d);
}

/* Injected time in Redis: real-time expiry must not race the test, so the
 * keys of a prefix are made persistent after writes (TTLs are tested below
 * with the real clock). */
static void persist_all(redisContext *c, const char *prefix) {
    char pattern[64];
    tu_keys keys;
    snprintf(pattern, sizeof(pattern), "%s:*", prefix);
    tu_scan(c, pattern, &keys);
    for (size_t i = 0; i < keys.n; i++)
        tu_cmd_int(c, "PERSIST %b", keys.names[i], keys.lens[i]);
    tu_keys_free(&keys);
}

/* Rate 5 per minute, one check every 6 s (twice the rate) for an hour: the
 * burst of 5, then every other check. A refill that floors 0.5 tokens away
 * and moves the timestamp anyway would admit 5 and starve. */
static void steady_traffic_twice_the_rate(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_TOKEN_BUCKET, 5, 60000, 0},
        {PORTEIRO_GCRA, 5, 60000, 0},
        {PORTEIRO_FIXED_WINDOW, 5, 60000, 0},
    };
    const int64_t want[] = {304, 304, 300};
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(backend_url(b), "steady", 0);
        for (size_t l = 0; l < 3; l++) {
            int64_t allowed = 0, denied_in_a_row = 0;
            char key[32];
            snprintf(key, sizeof(key), "twice-%zu", l);
            for (int64_t t = 0; t < 3600000; t += 6000) {
                porteiro_decision d;
                TU_EQ(check_at(p, &limits[l], 1, key, 1, t, &d), PORTEIRO_OK, "%s",
                      porteiro_errmsg(p));
                allowed += d.allowed;
                denied_in_a_row = d.allowed ? 0 : denied_in_a_row + 1;
                if (l < 2 && denied_in_a_row > 1) {
                    print_error("%s: limit %zu starves at t=%lld\n", backend_name(b), l,
                                (long long)t);
                    fail();
                }
            }
            TU_EQ(allowed, want[l], "%s: limit %zu", backend_name(b), l);
        }
        porteiro_free(p);
    }
}

/* Below the rate (one check every 24 s at 5 per minute): never denied. */
static void steady_traffic_below_the_rate(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_TOKEN_BUCKET, 5, 60000, 1},
        {PORTEIRO_GCRA, 5, 60000, 1},
        {PORTEIRO_FIXED_WINDOW, 5, 60000, 0},
        {PORTEIRO_SLIDING_WINDOW, 5, 60000, 0},
    };
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(backend_url(b), "below", 0);
        for (size_t l = 0; l < 4; l++) {
            for (int64_t t = 0; t < 3600000; t += 24000) {
                porteiro_decision d;
                TU_EQ(check_at(p, &limits[l], 1, "k", 1, t, &d), PORTEIRO_OK, "%s",
                      porteiro_errmsg(p));
                TU_EQ(d.allowed, 1, "%s: limit %zu at t=%lld", backend_name(b), l, (long long)t);
            }
        }
        porteiro_free(p);
    }
}

/* L = 3 per second, one check per ms for 2 s: admissions at exactly 0 (the
 * burst of 3), then 334, 667, 1000, 1334, 1667 ms (the first ms at which
 * 3t/1000 reaches each whole token). Doubles would drift off these. */
static void no_drift_three_per_second(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_TOKEN_BUCKET, 3, 1000, 0},
        {PORTEIRO_GCRA, 3, 1000, 0},
    };
    const int64_t want[] = {0, 0, 0, 334, 667, 1000, 1334, 1667};
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(backend_url(b), "drift", 0);
        redisContext *c = b ? tu_redis(&group_redis) : NULL;
        for (size_t l = 0; l < 2; l++) {
            size_t n = 0;
            char key[16];
            snprintf(key, sizeof(key), "k%zu", l);
            for (int64_t t = 0; t < 2000; t++) {
                porteiro_decision d;
                TU_EQ(check_at(p, &limits[l], 1, key, 1, t, &d), PORTEIRO_OK, "%s",
                      porteiro_errmsg(p));
                while (d.allowed) { /* drain every whole token at t */
                    assert_true(n < 8);
                    TU_EQ(t, want[n], "%s: limit %zu, admission %zu", backend_name(b), l, n);
                    n++;
                    if (c != NULL)
                        persist_all(c, "drift");
                    TU_EQ(check_at(p, &limits[l], 1, key, 1, t, &d), PORTEIRO_OK, "%s",
                          porteiro_errmsg(p));
                }
            }
            TU_EQ(n, 8, "%s: limit %zu", backend_name(b), l);
        }
        if (c != NULL)
            redisFree(c);
        porteiro_free(p);
    }
}

/* xorshift: a repeatable workload. */
static uint64_t rng_state = 0x1234567887654321ULL;
static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

/* A random walk of checks. After every denial with retry r >= 1: the same
 * check at t + r - 1 is still denied and at t + r it passes. */
static void retry_after_is_exact(void **state) {
    (void)state;
    const porteiro_limit policies[][2] = {
        {{PORTEIRO_FIXED_WINDOW, 10, 60000, 0}},
        {{PORTEIRO_TOKEN_BUCKET, 7, 60000, 4}},
        {{PORTEIRO_GCRA, 7, 60000, 5}},
        {{PORTEIRO_SLIDING_WINDOW, 10, 60000, 0}},
        {{PORTEIRO_GCRA, 3, 10000, 0}, {PORTEIRO_SLIDING_WINDOW, 13, 60000, 0}},
    };
    const size_t nlimits[] = {1, 1, 1, 1, 2};
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(backend_url(b), "retry", 0);
        redisContext *c = b ? tu_redis(&group_redis) : NULL;
        for (size_t k = 0; k < 5; k++) {
            int64_t t = 1000000, denials = 0;
            for (int step = 0; step < 300; step++) {
                porteiro_decision d;
                int64_t cost = 1 + (int64_t)rnd(3);
                t += (int64_t)rnd(4000);
                /* Redis expires in real time: no write with a TTL of a few
                 * ms (the last second of a one-minute window). */
                if (t % 60000 > 59000)
                    t += 1000;
                TU_EQ(check_at(p, policies[k], nlimits[k], "k", cost, t, &d), PORTEIRO_OK, "%s",
                      porteiro_errmsg(p));
                if (c != NULL && d.allowed)
                    persist_all(c, "retry");
                if (d.allowed || d.retry_after_ms < 1)
                    continue;
                denials++;
                int64_t r = d.retry_after_ms;
                TU_EQ(check_at(p, policies[k], nlimits[k], "k", cost, t + r - 1, &d), PORTEIRO_OK,
                      "");
                TU_EQ(d.allowed, 0, "%s: policy %zu, t=%lld retry %lld: too early", backend_name(b),
                      k, (long long)t, (long long)r);
                TU_EQ(check_at(p, policies[k], nlimits[k], "k", cost, t + r, &d), PORTEIRO_OK, "");
                TU_EQ(d.allowed, 1, "%s: policy %zu, t=%lld retry %lld: still denied",
                      backend_name(b), k, (long long)t, (long long)r);
                if (c != NULL)
                    persist_all(c, "retry");
                t += r;
            }
            /* The walk must actually hit the limits. */
            assert_true(denials > 10);
        }
        if (c != NULL)
            redisFree(c);
        porteiro_free(p);
    }
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Real clock, a mixed workload over every algorithm, part of it under a
 * changed L or B (the same keys: they name the algorithm and the period);
 * then every key under the prefix has a TTL, and each key's PTTL equals
 * its state's life (the reset a peek reports). */
static void every_key_has_a_ttl_no_longer_than_its_state(void **state) {
    (void)state;
    const porteiro_limit singles[] = {
        {PORTEIRO_FIXED_WINDOW, 5, 30000, 0},   {PORTEIRO_FIXED_WINDOW, 100, 3600000, 0},
        {PORTEIRO_TOKEN_BUCKET, 5, 30000, 0},   {PORTEIRO_TOKEN_BUCKET, 3, 7000, 9},
        {PORTEIRO_GCRA, 5, 30000, 0},           {PORTEIRO_GCRA, 7, 1000, 20},
        {PORTEIRO_SLIDING_WINDOW, 5, 30000, 0}, {PORTEIRO_SLIDING_WINDOW, 50, 86400000, 0},
        {PORTEIRO_SLIDING_LOG, 5, 30000, 0},
    };
    const size_t nsingles = sizeof(singles) / sizeof(singles[0]);
    const porteiro_limit policy[] = {
        {PORTEIRO_FIXED_WINDOW, 4, 20000, 0}, {PORTEIRO_TOKEN_BUCKET, 10, 60000, 0},
        {PORTEIRO_GCRA, 6, 60000, 0},         {PORTEIRO_SLIDING_WINDOW, 8, 40000, 0},
        {PORTEIRO_SLIDING_LOG, 9, 50000, 0},
    };
    porteiro_t *p = tu_open(group_redis.url, "ttl", 0);
    redisContext *c = tu_redis(&group_redis);
    porteiro_decision d;
    char key[32];

    for (int round = 0; round < 12; round++) {
        for (size_t i = 0; i < nsingles; i++) {
            /* Every other round under a higher L (B for the token bucket,
             * whose drain time, its TTL, is set by the L of its last write:
             * docs/algorithms.md): the same key. */
            porteiro_limit l = singles[i];
            bool change = round % 2 == 0;
            if (l.algorithm == PORTEIRO_TOKEN_BUCKET)
                l.burst = (l.burst > 0 ? l.burst : l.limit) + change;
            else
                l.limit += change;
            snprintf(key, sizeof(key), "single-%zu", i);
            TU_EQ(porteiro_check(p, &l, key, 1 + round % 3, &d), PORTEIRO_OK, "");
        }
        porteiro_request req = {.limits = policy,
                                .nlimits = 5,
                                .key = "policy",
                                .key_len = 6,
                                .cost = 1 + round % 2,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = 0};
        TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "");
    }
    /* A peek, a denial and a too-large cost on fresh keys write nothing. */
    TU_EQ(porteiro_check(p, &singles[0], "fresh-peek", 0, &d), PORTEIRO_OK, "");
    TU_EQ(porteiro_check(p, &singles[0], "fresh-big", 6, &d), PORTEIRO_OK, "");
    TU_EQ(d.allowed, 0, "");

    tu_keys keys;
    tu_scan(c, "ttl:*", &keys);
    TU_EQ(keys.n, nsingles + 5, "every limit of every key that was written, nothing else");
    for (size_t i = 0; i < keys.n; i++) {
        long long pttl = tu_cmd_int(c, "PTTL %b", keys.names[i], keys.lens[i]);
        if (pttl <= 0) {
            print_error("%s has PTTL %lld\n", keys.names[i], pttl);
            fail();
        }
    }
    tu_keys_free(&keys);

    for (size_t i = 0; i < nsingles; i++) {
        char pattern[64];
        snprintf(pattern, sizeof(pattern), "ttl:{single-%zu}:*", i);
        tu_scan(c, pattern, &keys);
        TU_EQ(keys.n, 1, "%s", pattern);
        int64_t t0 = now_ms();
        long long pttl = tu_cmd_int(c, "PTTL %b", keys.names[0], keys.lens[0]);
        snprintf(key, sizeof(key), "single-%zu", i);
        TU_EQ(porteiro_check(p, &singles[i], key, 0, &d), PORTEIRO_OK, "");
        int64_t slack = now_ms() - t0 + 2; /* ms passed between the two, rounding */
        if (pttl > d.reset_ms + slack || pttl < d.reset_ms - slack) {
            print_error("limit %zu: PTTL %lld, state's life %lld (slack %lld)\n", i, pttl,
                        (long long)d.reset_ms, (long long)slack);
            fail();
        }
        tu_keys_free(&keys);
    }
    /* The policy's keys: each TTL within the longest reset of its limits. */
    porteiro_request peek = {.limits = policy,
                             .nlimits = 5,
                             .key = "policy",
                             .key_len = 6,
                             .cost = 0,
                             .now_ms = PORTEIRO_NOW,
                             .max_wait_ms = 0};
    TU_EQ(porteiro_check_request(p, &peek, &d), PORTEIRO_OK, "");
    tu_scan(c, "ttl:{policy}:*", &keys);
    TU_EQ(keys.n, 5, "");
    for (size_t i = 0; i < keys.n; i++) {
        long long pttl = tu_cmd_int(c, "PTTL %b", keys.names[i], keys.lens[i]);
        assert_true(pttl > 0 && pttl <= d.reset_ms + 50);
    }
    tu_keys_free(&keys);
    redisFree(c);
    porteiro_free(p);
}

/* SCRIPT FLUSH empties Redis's script cache (as a restart or a failover
 * does): the next checks reload the script and nobody notices. */
static void script_flush_is_invisible(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 10, 60000, 0};
    for (int transport = 0; transport < 2; transport++) {
        porteiro_t *p = tu_open(transport ? group_redis.unix_url : group_redis.url,
                                transport ? "flush-unix" : "flush", 0);
        porteiro_decision d;
        int64_t t = 6000000;
        TU_EQ(check_at(p, &l, 1, "k", 1, t, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        TU_EQ(d.remaining, 9, "");
        assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "SCRIPT FLUSH"), 0);
        TU_EQ(check_at(p, &l, 1, "k", 2, t, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        TU_EQ(d.remaining, 7, "the state survived");
        TU_EQ(d.fallback, PORTEIRO_FALLBACK_NONE, "");

        /* A whole pipeline after a flush: every check re-sent as EVAL. */
        assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "SCRIPT FLUSH"), 0);
        porteiro_request reqs[5];
        porteiro_decision ds[5];
        porteiro_status sts[5];
        for (int i = 0; i < 5; i++)
            reqs[i] = (porteiro_request){.limits = &l,
                                         .nlimits = 1,
                                         .key = "k",
                                         .key_len = 1,
                                         .cost = 1,
                                         .now_ms = t,
                                         .max_wait_ms = 0};
        TU_EQ(porteiro_check_many(p, reqs, 5, ds, sts), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        for (int i = 0; i < 5; i++) {
            TU_EQ(sts[i], PORTEIRO_OK, "");
            TU_EQ(ds[i].remaining, 6 - i, "in order, each once");
        }
        porteiro_stats s;
        porteiro_stats_get(p, &s);
        TU_EQ(s.redis_errors, 0, "");
        TU_EQ(s.checks, 7, "");
        porteiro_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(steady_traffic_twice_the_rate),
        cmocka_unit_test(steady_traffic_below_the_rate),
        cmocka_unit_test(no_drift_three_per_second),
        cmocka_unit_test(retry_after_is_exact),
        cmocka_unit_test(every_key_has_a_ttl_no_longer_than_its_state),
        cmocka_unit_test(script_flush_is_invisible),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
