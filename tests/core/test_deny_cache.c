/* test_deny_cache.c — the deny cache answers exactly what Redis would, and
 * spares Redis the call: a handle with the cache and one without drive two
 * keys with the same random traffic on one real redis-server and must get
 * the same decisions; a hot denied key sends nothing to Redis; a reset or a
 * refund through the handle empties the cache; the cache stays bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "limiter/deny_cache.h"
#include "porteiro.h"
#include "porteiro_libevent.h"
#include "redis_server.h"
#include "test_util.h"

static porteiro_t *open_cached(const char *url, size_t deny_cache_keys) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 2000; /* a slow sanitizer build must not fall back */
    o.deny_cache_keys = deny_cache_keys;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    return p;
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

/* a is the cached handle's answer, b Redis's. Everything is equal, but for
 * the remaining of a denial: the cache answers it as of the denial, and the
 * state may have refilled since (a limit that allows, or a cost above 1), so
 * it is a lower bound there. */
static void same(const porteiro_decision *a, const porteiro_decision *b, int step) {
    TU_EQ(a->allowed, b->allowed, "step %d", step);
    TU_EQ(a->reset_ms, b->reset_ms, "step %d", step);
    TU_EQ(a->retry_after_ms, b->retry_after_ms, "step %d", step);
    TU_EQ(a->denied_by, b->denied_by, "step %d", step);
    TU_EQ(a->nlimits, b->nlimits, "step %d", step);
    for (size_t i = 0; i < a->nlimits; i++) {
        const porteiro_result *x = &a->limits[i], *y = &b->limits[i];
        TU_EQ(x->allowed, y->allowed, "step %d limit %zu", step, i);
        TU_EQ(x->reset_ms, y->reset_ms, "step %d limit %zu", step, i);
        TU_EQ(x->retry_after_ms, y->retry_after_ms, "step %d limit %zu", step, i);
        if (a->allowed)
            TU_EQ(x->remaining, y->remaining, "step %d limit %zu", step, i);
        else if (x->remaining > y->remaining)
            fail_msg("step %d limit %zu: cached remaining %lld above Redis's %lld", step, i,
                     (long long)x->remaining, (long long)y->remaining);
    }
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Redis round trips a handle made (the latency histogram counts each). */
static uint64_t round_trips(porteiro_t *p) {
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    uint64_t n = 0;
    for (size_t i = 0; i < PORTEIRO_LATENCY_BUCKETS; i++)
        n += s.latency[i];
    return n;
}

/* The same traffic on two keys, one through the cache: 600 steps, time
 * moving 0..60 ms (often not at all), costs 1..3 (mostly 1), a burst of
 * retries at the same instant after each denial. */
static void walk(const porteiro_limit *limits, size_t n, const char *tag, uint64_t seed) {
    porteiro_t *cached = open_cached(group_redis.url, 64), *plain = open_cached(group_redis.url, 0);
    char ka[64], kb[64];
    snprintf(ka, sizeof(ka), "walk-%s-a", tag);
    snprintf(kb, sizeof(kb), "walk-%s-b", tag);
    int64_t now = 1700000000000;
    for (int step = 0; step < 600; step++) {
        uint64_t r = next(&seed);
        now += (r % 3 == 0) ? (int64_t)(r >> 8) % 61 : 0;
        int64_t cost = (r >> 20) % 5 == 0 ? 1 + (int64_t)(r >> 24) % 3 : 1;
        porteiro_decision a, b;
        assert_int_equal(check_at(cached, limits, n, ka, cost, now, &a), PORTEIRO_OK);
        assert_int_equal(check_at(plain, limits, n, kb, cost, now, &b), PORTEIRO_OK);
        same(&a, &b, step);
    }
    porteiro_stats s;
    porteiro_stats_get(cached, &s);
    /* The walk must have used the cache, and every hit saved a call. */
    if (s.deny_cache_hits == 0)
        fail_msg("%s: no denial was answered by the cache", tag);
    TU_EQ(round_trips(cached) + s.deny_cache_hits, round_trips(plain), "%s", tag);
    porteiro_free(cached);
    porteiro_free(plain);
}

static void test_same_answers_fixed_window(void **state) {
    (void)state;
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 5, 1000, 0};
    walk(&l, 1, "fw", 11);
}

static void test_same_answers_token_bucket(void **state) {
    (void)state;
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, 10, 1000, 4};
    walk(&l, 1, "tb", 12);
}

static void test_same_answers_gcra(void **state) {
    (void)state;
    porteiro_limit l = {PORTEIRO_GCRA, 10, 1000, 3};
    walk(&l, 1, "gc", 13);
}

static void test_same_answers_sliding_window(void **state) {
    (void)state;
    porteiro_limit l = {PORTEIRO_SLIDING_WINDOW, 6, 1000, 0};
    walk(&l, 1, "sw", 14);
}

static void test_same_answers_sliding_log(void **state) {
    (void)state;
    porteiro_limit l = {PORTEIRO_SLIDING_LOG, 6, 1000, 0};
    walk(&l, 1, "sl", 15);
}

static void test_same_answers_policy(void **state) {
    (void)state;
    porteiro_limit ls[2] = {{PORTEIRO_GCRA, 20, 1000, 5}, {PORTEIRO_FIXED_WINDOW, 30, 2000, 0}};
    walk(ls, 2, "policy", 16);
}

static long long evalsha_calls(void) {
    char out[8192];
    if (test_redis_cmd(&group_redis, out, sizeof(out), "INFO commandstats") != 0)
        fail_msg("INFO commandstats failed");
    const char *at = strstr(out, "cmdstat_evalsha:calls=");
    return at != NULL ? atoll(at + strlen("cmdstat_evalsha:calls=")) : 0;
}

/* A hot key being denied: after the first denial, Redis sees nothing (real
 * clock), and every answer is a denial with a shrinking retry. */
static void test_hot_denied_key_spares_redis(void **state) {
    (void)state;
    porteiro_t *p = open_cached(group_redis.url, 16);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 3, PORTEIRO_MAX_PERIOD_MS, 0};
    porteiro_decision d;
    for (int i = 0; i < 4; i++)
        assert_int_equal(porteiro_check(p, &l, "hot", 1, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    int64_t first_retry = d.retry_after_ms;
    long long calls = evalsha_calls();
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(porteiro_check(p, &l, "hot", 1, &d), PORTEIRO_OK);
        assert_false(d.allowed);
        assert_true(d.retry_after_ms > 0 && d.retry_after_ms <= first_retry);
        assert_int_equal(d.remaining, 0);
    }
    TU_EQ(evalsha_calls(), calls, "Redis was called for a cached denial");
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    TU_EQ(s.deny_cache_hits, 1000, "hits");
    TU_EQ(s.denied, 1001, "denied");
    porteiro_free(p);
}

/* A reset through the handle: the next check goes to Redis and passes. */
static void test_reset_clears(void **state) {
    (void)state;
    porteiro_t *p = open_cached(group_redis.url, 16);
    porteiro_limit l = {PORTEIRO_GCRA, 2, 60000, 0};
    porteiro_decision d;
    for (int i = 0; i < 3; i++)
        assert_int_equal(porteiro_check(p, &l, "reset-me", 1, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    assert_int_equal(porteiro_check(p, &l, "reset-me", 1, &d), PORTEIRO_OK);
    assert_false(d.allowed); /* from the cache */
    assert_int_equal(
        porteiro_reset(
            p, &(porteiro_request){.limits = &l, .nlimits = 1, .key = "reset-me", .key_len = 8}),
        PORTEIRO_OK);
    assert_int_equal(porteiro_check(p, &l, "reset-me", 1, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 1);
    porteiro_free(p);
}

/* A refund through the handle gives units back: no stale denial after it. */
static void test_refund_clears(void **state) {
    (void)state;
    porteiro_t *p = open_cached(group_redis.url, 16);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 2, PORTEIRO_MAX_PERIOD_MS, 0};
    porteiro_decision d;
    for (int i = 0; i < 3; i++)
        assert_int_equal(porteiro_check(p, &l, "refund-me", 1, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    porteiro_request req = {.limits = &l,
                            .nlimits = 1,
                            .key = "refund-me",
                            .key_len = 9,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    assert_int_equal(porteiro_refund(p, &req, &d), PORTEIRO_OK);
    assert_int_equal(porteiro_check(p, &l, "refund-me", 1, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    porteiro_free(p);
}

/* Another instance's reset is seen once the remembered retry is over: the
 * documented staleness, bounded by retry_after_ms. */
static void test_other_instance_reset_seen_after_retry(void **state) {
    (void)state;
    porteiro_t *p = open_cached(group_redis.url, 16), *other = open_cached(group_redis.url, 0);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1, 1000, 0};
    porteiro_decision d;
    int64_t t = 1800000000000; /* a window start: retry is the whole window */
    assert_int_equal(check_at(p, &l, 1, "elsewhere", 1, t, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(check_at(p, &l, 1, "elsewhere", 1, t, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ms, 1000);
    assert_int_equal(
        porteiro_reset(
            other,
            &(porteiro_request){.limits = &l, .nlimits = 1, .key = "elsewhere", .key_len = 9}),
        PORTEIRO_OK);
    assert_int_equal(check_at(p, &l, 1, "elsewhere", 1, t + 999, &d), PORTEIRO_OK);
    assert_false(d.allowed); /* the cache has not seen the reset */
    assert_int_equal(d.retry_after_ms, 1);
    assert_int_equal(check_at(p, &l, 1, "elsewhere", 1, t + 1000, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    porteiro_free(p);
    porteiro_free(other);
}

/* Denials under on_error closed are the fallback's, not Redis's: never kept. */
static void test_fallback_not_cached(void **state) {
    (void)state;
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = "redis://127.0.0.1:1"; /* nothing listens there */
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    o.deny_cache_keys = 16;
    o.connect_timeout_ms = 50;
    o.command_timeout_ms = 50;
    o.breaker_failures = -1;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 5, 1000, 0};
    porteiro_decision d;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(porteiro_check(p, &l, "down", 1, &d), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_CLOSED);
    }
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    assert_int_equal(s.deny_cache_hits, 0);
    porteiro_free(p);
}

typedef struct async_answer {
    int calls;
    porteiro_status st;
    porteiro_decision d;
    struct event_base *base;
} async_answer;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    async_answer *a = arg;
    (void)p;
    a->calls++;
    a->st = st;
    if (d != NULL)
        a->d = *d;
    event_base_loopbreak(a->base);
}

/* The event-loop path takes the same decision path: a cached denial is
 * answered before porteiro_check_async returns, with no Redis call. */
static void test_async_uses_cache(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *p = open_cached(group_redis.url, 16);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_limit l = {PORTEIRO_GCRA, 2, 60000, 0};
    porteiro_request req = {.limits = &l,
                            .nlimits = 1,
                            .key = "async-hot",
                            .key_len = 9,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    async_answer a = {.base = base};
    for (int i = 0; i < 3; i++) {
        int before = a.calls;
        assert_int_equal(porteiro_check_async(p, &req, on_answer, &a), PORTEIRO_OK);
        while (a.calls == before)
            event_base_dispatch(base);
        assert_int_equal(a.st, PORTEIRO_OK);
    }
    assert_false(a.d.allowed);
    long long calls = evalsha_calls();
    assert_int_equal(porteiro_check_async(p, &req, on_answer, &a), PORTEIRO_OK);
    assert_int_equal(a.calls, 4); /* answered at once */
    assert_false(a.d.allowed);
    assert_true(a.d.retry_after_ms > 0);
    TU_EQ(evalsha_calls(), calls, "Redis was called for a cached denial");
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    TU_EQ(s.deny_cache_hits, 1, "hits");
    porteiro_free(p);
    event_base_free(base);
}

/* The cache itself: bounded, least recently used out, exact cost only. */
static void test_bounded_lru(void **state) {
    (void)state;
    pt_deny_cache *c = pt_deny_cache_new(4);
    assert_non_null(c);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1, 1000, 0};
    porteiro_decision denied = {
        .allowed = false,
        .retry_after_ms = 500,
        .nlimits = 1,
        .limits = {{.allowed = false, .limit = 1, .retry_after_ms = 500, .reset_ms = 500}}};
    pt_call calls[10];
    char key[16];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(
            pt_call_prepare(&calls[i], "t", 1, &l, 1, key, strlen(key), 1, 1000, NULL, 0),
            PORTEIRO_OK);
    }
    porteiro_decision out;
    for (int i = 0; i < 10; i++) {
        pt_deny_cache_put(c, &calls[i], 1000, &denied);
        if (i == 4) /* k1 used again: it outlives k2.. */
            assert_true(pt_deny_cache_get(c, &calls[1], 1000, &out));
        assert_true(pt_deny_cache_count(c) <= 4);
    }
    assert_int_equal(pt_deny_cache_count(c), 4);
    for (int i = 0; i < 10; i++) /* kept: the 4 most recent, k6..k9 */
        assert_int_equal(pt_deny_cache_get(c, &calls[i], 1100, &out), i >= 6);
    assert_true(pt_deny_cache_get(c, &calls[9], 1100, &out));
    assert_int_equal(out.retry_after_ms, 400);
    assert_int_equal(out.limits[0].reset_ms, 400);
    assert_false(pt_deny_cache_get(c, &calls[9], 1500, &out)); /* over */
    pt_call two = calls[8];
    pt_call_copy(&two, &calls[8]);
    two.cost = 2;
    assert_false(pt_deny_cache_get(c, &two, 1100, &out)); /* another cost */
    pt_deny_cache_forget_all(c);
    assert_false(pt_deny_cache_get(c, &calls[7], 1100, &out));
    pt_deny_cache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_answers_fixed_window),
        cmocka_unit_test(test_same_answers_token_bucket),
        cmocka_unit_test(test_same_answers_gcra),
        cmocka_unit_test(test_same_answers_sliding_window),
        cmocka_unit_test(test_same_answers_sliding_log),
        cmocka_unit_test(test_same_answers_policy),
        cmocka_unit_test(test_hot_denied_key_spares_redis),
        cmocka_unit_test(test_async_uses_cache),
        cmocka_unit_test(test_reset_clears),
        cmocka_unit_test(test_refund_clears),
        cmocka_unit_test(test_other_instance_reset_seen_after_retry),
        cmocka_unit_test(test_fallback_not_cached),
        cmocka_unit_test(test_bounded_lru),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
