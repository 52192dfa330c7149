/* test_hash_flood.c — hash tables a client's keys index cannot be flooded
 * (issue 33, "Hashes a client cannot aim"). Keys are generated here that
 * all fall in one bucket under the hashes these tables used before
 * (unkeyed FNV-1a: its low bits depend only on the input's, so a few
 * thousand tries find each one); with SipHash under the process's random
 * key they spread like any keys, and a check's cost stays flat:
 *   - the quota lease table (src/limiter/quota.c), through porteiro_check
 *     with leases on and the breaker open (no Redis round trip to hide
 *     the table's cost): 20 000 crafted keys cost about what 20 000
 *     ordinary ones do;
 *   - the quota table stays bounded past its 65 536 entries: the least
 *     recently used makes room, in O(1);
 *   - the deny cache (src/limiter/deny_cache.c): 4 096 crafted denials
 *     answered again cost about what ordinary ones do.
 * Time is the thread's CPU time, so other processes on the machine do not
 * move it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/call.h"
#include "limiter/deny_cache.h"
#include "porteiro.h"
#include "redis_server.h"

#define PREFIX "porteiro"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t fnv_step(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* n client keys "c" + 9 digits whose identity, as the old tables hashed it
 * (per limit: its Redis key's length as 4 bytes, then the key; then what
 * follows, the same for all), has the same low `bits` bits of FNV-1a: one
 * bucket of a table of 2^bits buckets. The Redis key is the library's own
 * (pt_call_prepare), so the bytes around the client key are exact. */
static char (*colliding_keys(const porteiro_limit *l, size_t n, int bits))[11] {
    char(*keys)[11] = calloc(n, sizeof(*keys));
    assert_non_null(keys);
    pt_call call;
    char err[128];
    assert_int_equal(pt_call_prepare(&call, PREFIX, strlen(PREFIX), l, 1, "c000000000", 10, 1,
                                     PORTEIRO_NOW, err, sizeof(err)),
                     PORTEIRO_OK);
    const char *at = NULL;
    for (size_t i = 0; at == NULL && i + 10 <= call.key_lens[0]; i++)
        if (memcmp(call.keys[0] + i, "c000000000", 10) == 0)
            at = call.keys[0] + i;
    assert_non_null(at);
    uint32_t kl = (uint32_t)call.key_lens[0];
    uint64_t before = fnv_step(1469598103934665603ULL, &kl, sizeof(kl));
    before = fnv_step(before, call.keys[0], (size_t)(at - call.keys[0]));
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    uint64_t target = fnv_step(before, "c000000000", 10) & mask;
    size_t found = 0;
    for (uint64_t hi = 0; found < n; hi++) {
        char key[11];
        snprintf(key, sizeof(key), "c%06llu000", (unsigned long long)hi);
        uint64_t h7 = fnv_step(before, key, 7);
        for (int lo = 0; lo < 1000 && found < n; lo++) {
            key[7] = (char)('0' + lo / 100);
            key[8] = (char)('0' + lo / 10 % 10);
            key[9] = (char)('0' + lo % 10);
            if ((fnv_step(h7, key + 7, 3) & mask) == target)
                memcpy(keys[found++], key, 11);
        }
    }
    /* Checked whole, through the library's key, for the first few: the
     * whole identity's low bits agree. */
    uint64_t first = 0;
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(pt_call_prepare(&call, PREFIX, strlen(PREFIX), l, 1, keys[i], 10, 1,
                                         PORTEIRO_NOW, err, sizeof(err)),
                         PORTEIRO_OK);
        assert_int_equal(call.key_lens[0], kl);
        uint64_t h = fnv_step(1469598103934665603ULL, &kl, sizeof(kl));
        h = fnv_step(h, call.keys[0], call.key_lens[0]) & mask;
        if (i == 0)
            first = h;
        assert_true(h == first);
    }
    return keys;
}

/* The CPU seconds of one porteiro_check per key. */
static double time_checks(porteiro_t *p, const porteiro_limit *l, char (*keys)[11], size_t n,
                          int round) {
    double t0 = cpu_s();
    for (size_t i = 0; i < n; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, l, keys[i], 1, &d), PORTEIRO_OK);
        if (d.fallback != PORTEIRO_FALLBACK_OPEN)
            fail_msg("round %d, key %zu: expected the open breaker's answer", round, i);
    }
    return cpu_s() - t0;
}

#define QUOTA_KEYS 20000

/* The quota table: every cold check of a key with a lease makes an entry,
 * found again by each later check of that key. The breaker is open (Redis
 * is gone): each check is the table's lookup, then the breaker's answer. */
/* A handle with leases on whose breaker is open (its Redis stopped). */
static porteiro_t *open_breaker_open(const porteiro_limit *l) {
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = r.url;
    o.prefix = PREFIX;
    o.on_error = PORTEIRO_ON_ERROR_OPEN;
    o.command_timeout_ms = 200;
    o.breaker_failures = 1;
    o.breaker_cooldown_ms = 600000;
    o.quota_lease = (porteiro_quota_lease){200, 1000, 0};
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, l, "warm", 1, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    test_redis_stop(&r);
    for (int i = 0; i < 20 && d.fallback == PORTEIRO_FALLBACK_NONE; i++)
        assert_int_equal(porteiro_check(p, l, "warm", 1, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_OPEN);
    return p;
}

static void quota_table_flat(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 3600000, 0};
    porteiro_t *p = open_breaker_open(&l);

    /* Ordinary keys, and keys in one old bucket (4 096 of them). */
    char(*plain)[11] = calloc(QUOTA_KEYS, sizeof(*plain));
    assert_non_null(plain);
    for (size_t i = 0; i < QUOTA_KEYS; i++)
        snprintf(plain[i], 11, "p%09zu", i * 7919);
    char(*crafted)[11] = colliding_keys(&l, QUOTA_KEYS, 12);
    porteiro_stats before;
    porteiro_stats_get(p, &before);
    double t_plain = 0, t_crafted = 0;
    for (int round = 0; round < 2; round++) { /* made, then found again */
        t_plain += time_checks(p, &l, plain, QUOTA_KEYS, round);
        t_crafted += time_checks(p, &l, crafted, QUOTA_KEYS, round);
    }
    porteiro_stats after;
    porteiro_stats_get(p, &after);
    fprintf(stderr, "quota table: %d ordinary keys %.1f us a check, %d crafted keys %.1f us\n",
            QUOTA_KEYS, t_plain / (2 * QUOTA_KEYS) * 1e6, QUOTA_KEYS,
            t_crafted / (2 * QUOTA_KEYS) * 1e6);
    /* Every one of these checks went through the table (a cold key's). */
    assert_int_equal(after.quota_cold - before.quota_cold, 4 * QUOTA_KEYS);
    assert_true(t_crafted <= 3 * t_plain + 0.05);
    free(plain);
    free(crafted);
    porteiro_free(p);
}

/* Bounded: 100 000 distinct cold keys, more than the table's 65 536
 * entries. Each check still finds room (the least recently used entry
 * goes: every one is counted cold, none refused a lease entry), at the
 * same cost at the end as at the start. */
static void quota_table_bounded(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 3600000, 0};
    porteiro_t *p = open_breaker_open(&l);
    enum { ROUND = 10000, ROUNDS = 10 };
    char(*keys)[11] = calloc(ROUND, sizeof(*keys));
    assert_non_null(keys);
    porteiro_stats before, after;
    porteiro_stats_get(p, &before);
    double first = 0, last = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < ROUND; i++)
            snprintf(keys[i], 11, "b%09zu", (size_t)round * ROUND + i);
        double t = time_checks(p, &l, keys, ROUND, round);
        if (round == 0)
            first = t;
        last = t;
    }
    porteiro_stats_get(p, &after);
    fprintf(stderr, "quota table: first %d keys %.1f us a check, keys %d to %d %.1f us\n", ROUND,
            first / ROUND * 1e6, (ROUNDS - 1) * ROUND, ROUNDS * ROUND, last / ROUND * 1e6);
    assert_int_equal(after.quota_cold - before.quota_cold, ROUNDS * ROUND);
    assert_true(last <= 3 * first + 0.05);
    free(keys);
    porteiro_free(p);
}

#define DENY_KEYS 4096

/* The CPU seconds of looking up each key's denial (all found). */
static double time_denials(pt_deny_cache *c, const porteiro_limit *l, char (*keys)[11], size_t n) {
    porteiro_decision d = {.allowed = false,
                           .limit = 1,
                           .retry_after_ms = 60000,
                           .reset_ms = 60000,
                           .denied_by = 0,
                           .nlimits = 1};
    d.limits[0] = (porteiro_result){0};
    d.limits[0].limit = 1;
    d.limits[0].retry_after_ms = 60000;
    d.limits[0].reset_ms = 60000;
    pt_call call;
    char err[128];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(pt_call_prepare(&call, PREFIX, strlen(PREFIX), l, 1, keys[i], 10, 1,
                                         PORTEIRO_NOW, err, sizeof(err)),
                         PORTEIRO_OK);
        pt_deny_cache_put(c, &call, 1000, &d);
    }
    assert_int_equal(pt_deny_cache_count(c), n);
    /* Each lookup with its call's preparation (the same work for any key:
     * what differs is the chain walked). */
    size_t hits = 0;
    double t0 = cpu_s();
    for (int round = 0; round < 4; round++)
        for (size_t i = 0; i < n; i++) {
            (void)pt_call_prepare(&call, PREFIX, strlen(PREFIX), l, 1, keys[i], 10, 1, PORTEIRO_NOW,
                                  err, sizeof(err));
            porteiro_decision out;
            hits += pt_deny_cache_get(c, &call, 1001, &out);
        }
    double t = cpu_s() - t0;
    assert_int_equal(hits, 4 * n);
    return t;
}

static void deny_cache_flat(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1, 3600000, 1};
    char(*plain)[11] = calloc(DENY_KEYS, sizeof(*plain));
    assert_non_null(plain);
    for (size_t i = 0; i < DENY_KEYS; i++)
        snprintf(plain[i], 11, "p%09zu", i * 7919);
    /* The cache of DENY_KEYS entries has DENY_KEYS buckets: 12 bits. */
    char(*crafted)[11] = colliding_keys(&l, DENY_KEYS, 12);
    pt_deny_cache *a = pt_deny_cache_new(DENY_KEYS), *b = pt_deny_cache_new(DENY_KEYS);
    assert_non_null(a);
    assert_non_null(b);
    double t_plain = time_denials(a, &l, plain, DENY_KEYS);
    double t_crafted = time_denials(b, &l, crafted, DENY_KEYS);
    fprintf(stderr, "deny cache: ordinary keys %.2f us a lookup, crafted keys %.2f us\n",
            t_plain / (4 * DENY_KEYS) * 1e6, t_crafted / (4 * DENY_KEYS) * 1e6);
    assert_true(t_crafted <= 3 * t_plain + 0.02);
    pt_deny_cache_free(a);
    pt_deny_cache_free(b);
    free(plain);
    free(crafted);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quota_table_flat),
        cmocka_unit_test(quota_table_bounded),
        cmocka_unit_test(deny_cache_flat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
