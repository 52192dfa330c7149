/* test_twins.c — the C core and the Lua scripts are twins: random checks,
 * peeks and refunds give identical
 * decisions on the memory backend and on a real redis-server, for every
 * algorithm alone and for a policy mixing them. */
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

static porteiro_t *open_url(const char *url) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    if (url != NULL)
        o.tls_ca_file = test_group_ca; /* the _tls build: verify the test CA */
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 1000; /* a slow sanitizer build must not fall back */
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void same(const porteiro_decision *a, const porteiro_decision *b, int step) {
    bool eq = a->allowed == b->allowed && a->remaining == b->remaining &&
              a->reset_ms == b->reset_ms && a->retry_after_ms == b->retry_after_ms &&
              a->denied_by == b->denied_by && a->nlimits == b->nlimits && a->wait_ms == b->wait_ms;
    for (size_t i = 0; eq && i < a->nlimits; i++) {
        const porteiro_result *x = &a->limits[i], *y = &b->limits[i];
        eq = x->allowed == y->allowed && x->limit == y->limit && x->remaining == y->remaining &&
             x->reset_ms == y->reset_ms && x->retry_after_ms == y->retry_after_ms &&
             x->wait_ms == y->wait_ms;
    }
    if (!eq)
        fail_msg("step %d: memory allowed %d remaining %lld reset %lld retry %lld wait %lld, "
                 "redis %d %lld %lld %lld %lld",
                 step, a->allowed, (long long)a->remaining, (long long)a->reset_ms,
                 (long long)a->retry_after_ms, (long long)a->wait_ms, b->allowed,
                 (long long)b->remaining, (long long)b->reset_ms, (long long)b->retry_after_ms,
                 (long long)b->wait_ms);
}

/* 400 random steps: time moves 0..399 ms (one step in 8 stays in the same
 * ms), costs 0..7, one step in 6 is a refund of 1..7. Time never goes back
 * here: the memory backend expires keys by the injected clock and Redis by
 * its own, so a jump back across an expiry is not comparable; the clock
 * going back is covered by the scenario tables instead. */
/* reserve: one check in two may wait up to 0..2999 ms (a reservation). */
static void walk(const porteiro_limit *limits, size_t n, const char *key, uint64_t seed,
                 bool reserve) {
    porteiro_t *mem = open_url(NULL), *red = open_url(group_redis.url);
    int64_t now = 10000000;
    int waited = 0;
    for (int step = 0; step < 400; step++) {
        uint64_t r = next(&seed);
        now += (r % 8 == 0) ? 0 : (int64_t)((r >> 8) % 400);
        int64_t cost = (int64_t)((r >> 20) % 8);
        bool refund = (r >> 40) % 6 == 0;
        int64_t max_wait = reserve && (r >> 44) % 2 == 0 ? (int64_t)((r >> 46) % 3000) : 0;
        porteiro_request req = {.limits = limits,
                                .nlimits = n,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = refund ? cost + 1 : cost,
                                .now_ms = now,
                                .max_wait_ms = refund ? 0 : max_wait};
        porteiro_decision a, b;
        if (refund) {
            assert_int_equal(porteiro_refund(mem, &req, &a), PORTEIRO_OK);
            assert_int_equal(porteiro_refund(red, &req, &b), PORTEIRO_OK);
        } else {
            assert_int_equal(porteiro_check_request(mem, &req, &a), PORTEIRO_OK);
            assert_int_equal(porteiro_check_request(red, &req, &b), PORTEIRO_OK);
        }
        if (getenv("TWIN_TRACE") && step >= atoi(getenv("TWIN_TRACE")))
            for (size_t i = 0; i < n; i++)
                fprintf(
                    stderr,
                    "step %d now %lld cost %lld refund %d | %zu: mem %d %lld %lld %lld  redis %d %lld %lld %lld\n",
                    step, (long long)now, (long long)req.cost, refund, i, a.limits[i].allowed,
                    (long long)a.limits[i].remaining, (long long)a.limits[i].reset_ms,
                    (long long)a.limits[i].retry_after_ms, b.limits[i].allowed,
                    (long long)b.limits[i].remaining, (long long)b.limits[i].reset_ms,
                    (long long)b.limits[i].retry_after_ms);
        same(&a, &b, step);
        waited += a.wait_ms > 0;
        if (a.wait_ms > 0)
            assert_true(a.allowed && a.wait_ms <= max_wait);
    }
    /* The walk did make reservations (else it would test nothing new). */
    if (reserve)
        assert_true(waited > 10);
    porteiro_free(mem);
    porteiro_free(red);
}

static void random_walk(const porteiro_limit *limits, size_t n, const char *key, uint64_t seed) {
    walk(limits, n, key, seed, false);
    char k2[64];
    snprintf(k2, sizeof(k2), "%s-wait", key);
    walk(limits, n, k2, seed ^ 0x5bd1e995, true);
}

static void each_algorithm(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_FIXED_WINDOW, 10, 1000, 0}, {PORTEIRO_SLIDING_WINDOW, 10, 1000, 0},
        {PORTEIRO_SLIDING_LOG, 10, 1000, 0},  {PORTEIRO_TOKEN_BUCKET, 7, 1000, 12},
        {PORTEIRO_GCRA, 7, 1000, 12},
    };
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        char key[32];
        snprintf(key, sizeof(key), "twin-%zu", i);
        random_walk(&limits[i], 1, key, 0x9e3779b97f4a7c15ULL + i);
    }
}

static void mixed_policy(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_SLIDING_LOG, 6, 700, 0},
        {PORTEIRO_SLIDING_WINDOW, 20, 3000, 0},
        {PORTEIRO_GCRA, 3, 500, 5},
    };
    random_walk(limits, 3, "twin-policy", 42);
}

/* Counter algorithms only: checks and peeks run the flat policy script
 * (src/lua/check/policy.lua), refunds the general one, on the same state. */
static void counter_policy(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_FIXED_WINDOW, 25, 2000, 0},
        {PORTEIRO_SLIDING_WINDOW, 20, 3000, 0},
        {PORTEIRO_TOKEN_BUCKET, 4, 700, 9},
        {PORTEIRO_GCRA, 3, 500, 5},
    };
    random_walk(limits, 4, "twin-counters", 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_algorithm),
        cmocka_unit_test(mixed_policy),
        cmocka_unit_test(counter_policy),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
