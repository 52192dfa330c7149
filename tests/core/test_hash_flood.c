/* test_hash_flood.c — hash tables a client's keys index cannot be flooded
 * (issue 33, "Hashes a client cannot aim"). The tables place keys by
 * SipHash under the process's random key (core/siphash.h). An attacker who
 * knew that key could find, by brute force, keys that all fall in one
 * bucket; here the known key is K0 (all zero) and keys are crafted that
 * collide under it, for the exact bytes each table hashes:
 *   - the quota lease table (src/limiter/quota.c, 16 384 buckets), through
 *     porteiro_check with leases on and the breaker open (no Redis round
 *     trip to hide the table's cost);
 *   - the memory backend's store (src/memory/store.c), through
 *     porteiro_check on a handle without Redis;
 *   - the deny cache (src/limiter/deny_cache.c);
 *   - the top keys' index (src/core/topkeys.c, open addressing).
 * Each table is measured twice with the same crafted and ordinary keys:
 * once with the process key forced to K0 (written through
 * pt_keyed_hash_key's pointer), where the crafted keys must cost several
 * times the ordinary ones (the crafting aims right: a table that hashed
 * without a key, or with a fixed one, would be flooded), and once with the
 * process's own random key, where they must cost about the same (flat).
 * The quota table also stays bounded past its 65 536 entries. Time is the
 * thread's CPU time, so other processes on the machine do not move it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/call.h"
#include "core/siphash.h"
#include "core/topkeys.h"
#include "limiter/deny_cache.h"
#include "porteiro.h"
#include "redis_server.h"

#define PREFIX "porteiro"
#define KEY_LEN 10 /* "c" and 9 digits */

/* Crafted keys must cost at most FLAT times ordinary ones under the
 * process's key; under K0 at least a table's own `aimed` times (the
 * longer its crafted chain, the more). */
#define FLAT 1.4

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the process key ------------------------------------------------------ */

static const uint8_t k0[PT_SIPHASH_KEY_LEN]; /* the attacker's known key */
static uint8_t own_key[PT_SIPHASH_KEY_LEN];
static bool forced; /* the process key is K0 now */

/* The process key forced to K0 (true), or given back its own (false). The
 * key is a static array the library owns; its pointer is const only for
 * its callers. A table must be made and used under one key. */
static void use_k0(bool on) {
    uint8_t *key = (uint8_t *)(uintptr_t)pt_keyed_hash_key();
    if (on && !forced) {
        memcpy(own_key, key, sizeof(own_key));
        memcpy(key, k0, sizeof(own_key));
    } else if (!on && forced) {
        memcpy(key, own_key, sizeof(own_key));
    }
    forced = on;
}

/* After each test, failed or not: the process's own key again. */
static int own_key_again(void **state) {
    (void)state;
    use_k0(false);
    return 0;
}

/* ---- crafting ------------------------------------------------------------- */

typedef char key_t11[KEY_LEN + 1];

/* The bytes a table hashes for the client key "c000000000" (its template:
 * the crafted keys replace those 10 bytes in place). */
typedef size_t bytes_fn(const porteiro_limit *l, uint8_t *out, size_t cap);

/* The Redis key of client key "c000000000" (pt_call_prepare: the library's
 * own), and where the client key sits in it. */
static size_t redis_key(const porteiro_limit *l, char *out, size_t cap) {
    pt_call call;
    char err[128];
    assert_int_equal(pt_call_prepare(&call, PREFIX, strlen(PREFIX), l, 1, "c000000000", KEY_LEN, 1,
                                     PORTEIRO_NOW, err, sizeof(err)),
                     PORTEIRO_OK);
    assert_true(call.key_lens[0] <= cap);
    memcpy(out, call.keys[0], call.key_lens[0]);
    return call.key_lens[0];
}

/* The memory store: the Redis key itself. */
static size_t memory_bytes(const porteiro_limit *l, uint8_t *out, size_t cap) {
    return redis_key(l, (char *)out, cap);
}

/* The quota table: per limit, the Redis key's length (4 bytes), the key. */
static size_t quota_bytes(const porteiro_limit *l, uint8_t *out, size_t cap) {
    uint32_t kl = (uint32_t)redis_key(l, (char *)out + 4, cap - 4);
    memcpy(out, &kl, 4);
    return 4 + kl;
}

/* The deny cache: the quota table's, then the limit's parameters, then
 * whether the time was injected (a single check's: no costs). */
static size_t deny_bytes(const porteiro_limit *l, uint8_t *out, size_t cap) {
    size_t n = quota_bytes(l, out, cap);
    int64_t params[4] = {(int64_t)l->algorithm, l->limit, l->period_ms, l->burst};
    assert_true(n + sizeof(params) + 1 <= cap);
    memcpy(out + n, params, sizeof(params));
    n += sizeof(params);
    out[n++] = 0;
    return n;
}

/* The top keys: the client key. */
static size_t top_bytes(const porteiro_limit *l, uint8_t *out, size_t cap) {
    (void)l;
    (void)cap;
    memcpy(out, "c000000000", KEY_LEN);
    return KEY_LEN;
}

/* n client keys whose bytes (as bytes_fn lays them out) have the same low
 * `bits` bits of SipHash under K0: one bucket of a table of 2^bits buckets
 * (or fewer), and one run of an open-addressing index of that size. */
static key_t11 *crafted_keys(bytes_fn *f, const porteiro_limit *l, size_t n, int bits) {
    key_t11 *keys = calloc(n, sizeof(*keys));
    assert_non_null(keys);
    uint8_t buf[2048];
    size_t len = f(l, buf, sizeof(buf)), at = len;
    for (size_t i = 0; at == len && i + KEY_LEN <= len; i++)
        if (memcmp(buf + i, "c000000000", KEY_LEN) == 0)
            at = i;
    assert_true(at < len);
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    uint64_t target = pt_siphash(k0, buf, len) & mask;
    /* The candidates "c000000001", "c000000002", ... counted in place. */
    uint8_t *digits = buf + at;
    size_t found = 0;
    double t0 = cpu_s();
    while (found < n) {
        for (int d = KEY_LEN - 1; d > 0 && ++digits[d] > '9'; d--)
            digits[d] = '0';
        if ((pt_siphash(k0, buf, len) & mask) == target) {
            memcpy(keys[found], digits, KEY_LEN);
            keys[found++][KEY_LEN] = '\0';
        }
    }
    fprintf(stderr, "crafted %zu keys (%d bits) in %.2f s of CPU\n", n, bits, cpu_s() - t0);
    return keys;
}

/* n ordinary keys. */
static key_t11 *plain_keys(size_t n) {
    key_t11 *keys = calloc(n, sizeof(*keys));
    assert_non_null(keys);
    for (size_t i = 0; i < n; i++)
        snprintf(keys[i], KEY_LEN + 1, "p%09zu", i * 7919);
    return keys;
}

/* A table measured: made (empty, under the process key of the moment),
 * passed over with n keys (round 0 makes their entries, later rounds find
 * them again; the CPU seconds returned), dropped. */
typedef struct table_ops {
    const char *name;
    void *(*make)(const porteiro_limit *l, size_t n);
    double (*pass)(void *t, const porteiro_limit *l, key_t11 *keys, size_t n, int round);
    void (*drop)(void *t, size_t n);
} table_ops;

#define ROUNDS 8

/* Crafted keys' cost over ordinary ones in one table, under K0 and under
 * the process's key: two tables side by side, their rounds interleaved,
 * the fastest round after the first of each compared (what another
 * process does to the caches moves both, and the fastest round least). */
static void crafted_vs_plain(const table_ops *ops, const porteiro_limit *l, key_t11 *crafted,
                             key_t11 *plain, size_t n, double aimed) {
    double ratio[2];
    for (int k = 0; k < 2; k++) {
        use_k0(k == 0);
        void *tp = ops->make(l, n), *tc = ops->make(l, n);
        double best_p = 1e9, best_c = 1e9;
        for (int round = 0; round < ROUNDS; round++) {
            double t_plain = ops->pass(tp, l, plain, n, round);
            double t_crafted = ops->pass(tc, l, crafted, n, round);
            if (round > 0 && t_plain < best_p)
                best_p = t_plain;
            if (round > 0 && t_crafted < best_c)
                best_c = t_crafted;
        }
        ops->drop(tp, n);
        ops->drop(tc, n);
        if (k == 0)
            use_k0(false);
        ratio[k] = best_c / best_p;
        fprintf(stderr,
                "%s, %s: %zu ordinary keys %.2f us each, %zu crafted keys %.2f us (x%.2f)\n",
                ops->name, k == 0 ? "key K0 (known)" : "the process's key", n, best_p / n * 1e6, n,
                best_c / n * 1e6, ratio[k]);
    }
    assert_true(ratio[0] >= aimed); /* the keys are aimed right */
    assert_true(ratio[1] <= FLAT);  /* and miss under the process's key */
}

/* The CPU seconds of one porteiro_check per key. expect: the fallback
 * every answer must carry (the open breaker's, or none). */
static double time_checks(porteiro_t *p, const porteiro_limit *l, key_t11 *keys, size_t n,
                          int round, porteiro_fallback expect) {
    double t0 = cpu_s();
    for (size_t i = 0; i < n; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, l, keys[i], 1, &d), PORTEIRO_OK);
        if (d.fallback != expect)
            fail_msg("round %d, key %zu: fallback %d, expected %d", round, i, (int)d.fallback,
                     (int)expect);
    }
    return cpu_s() - t0;
}

/* A handle with leases on whose breaker is open (its Redis stopped).
 * lease_ms: the lease's max_ms, which is also how long a key's checks are
 * observed for a lease: a key checked less often stays cold. */
static porteiro_t *open_breaker_open(const porteiro_limit *l, int64_t lease_ms) {
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
    o.quota_lease = (porteiro_quota_lease){lease_ms, 1000, 0};
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

/* ---- the quota table -------------------------------------------------------- */

/* Every cold check of a key with a lease makes an entry, found again by
 * each later check of that key. The breaker is open (Redis is gone): each
 * check is the table's lookup, then the breaker's answer. A table of
 * 16 384 buckets: 14 bits. */
#define QUOTA_KEYS 1500
#define QUOTA_BITS 14

static void *quota_make(const porteiro_limit *l, size_t n) {
    (void)n;
    return open_breaker_open(l, 1); /* each key's next check is over 1 ms later: cold */
}

static double quota_pass(void *t, const porteiro_limit *l, key_t11 *keys, size_t n, int round) {
    porteiro_stats before, after;
    porteiro_stats_get(t, &before);
    double s = time_checks(t, l, keys, n, round, PORTEIRO_FALLBACK_OPEN);
    porteiro_stats_get(t, &after);
    /* Every one of these checks went through the table (a cold key's). */
    assert_int_equal(after.quota_cold - before.quota_cold, n);
    return s;
}

static void quota_drop(void *t, size_t n) {
    (void)n;
    porteiro_free(t);
}

static void quota_table_flat(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 3600000, 0};
    const table_ops ops = {"quota table", quota_make, quota_pass, quota_drop};
    key_t11 *plain = plain_keys(QUOTA_KEYS);
    key_t11 *crafted = crafted_keys(quota_bytes, &l, QUOTA_KEYS, QUOTA_BITS);
    crafted_vs_plain(&ops, &l, crafted, plain, QUOTA_KEYS, 1.8);
    free(plain);
    free(crafted);
}

/* Bounded: 100 000 distinct cold keys, more than the table's 65 536
 * entries. Each check still finds room (the least recently used entry
 * goes: every one is counted cold, none refused a lease entry), at the
 * same cost at the end as at the start. */
static void quota_table_bounded(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 3600000, 0};
    porteiro_t *p = open_breaker_open(&l, 200);
    enum { ROUND = 10000, NROUNDS = 10 };
    key_t11 *keys = calloc(ROUND, sizeof(*keys));
    assert_non_null(keys);
    porteiro_stats before, after;
    porteiro_stats_get(p, &before);
    double first = 0, last = 0;
    for (int round = 0; round < NROUNDS; round++) {
        for (size_t i = 0; i < ROUND; i++)
            snprintf(keys[i], KEY_LEN + 1, "b%09zu", (size_t)round * ROUND + i);
        double t = time_checks(p, &l, keys, ROUND, round, PORTEIRO_FALLBACK_OPEN);
        if (round == 0)
            first = t;
        last = t;
    }
    porteiro_stats_get(p, &after);
    fprintf(stderr, "quota table: first %d keys %.1f us a check, keys %d to %d %.1f us\n", ROUND,
            first / ROUND * 1e6, (NROUNDS - 1) * ROUND, NROUNDS * ROUND, last / ROUND * 1e6);
    assert_int_equal(after.quota_cold - before.quota_cold, NROUNDS * ROUND);
    assert_true(last <= 3 * first + 0.05);
    free(keys);
    porteiro_free(p);
}

/* ---- the memory backend's store ------------------------------------------------ */

/* A handle without Redis: each check is decided in the store, whose
 * buckets (1 024 at first, doubled past one key a bucket) 2 000 keys take
 * to 2 048: keys that share 12 bits share a bucket. */
#define MEMORY_KEYS 2000
#define MEMORY_BITS 12

static void *memory_make(const porteiro_limit *l, size_t n) {
    (void)l;
    (void)n;
    porteiro_options o;
    porteiro_options_init(&o);
    o.prefix = PREFIX;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static double memory_pass(void *t, const porteiro_limit *l, key_t11 *keys, size_t n, int round) {
    return time_checks(t, l, keys, n, round, PORTEIRO_FALLBACK_NONE);
}

static void memory_drop(void *t, size_t n) {
    porteiro_stats st;
    porteiro_stats_get(t, &st);
    assert_int_equal(st.memory_keys, n); /* each key has its state in the store */
    porteiro_free(t);
}

static void memory_store_flat(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 3600000, 0};
    const table_ops ops = {"memory store", memory_make, memory_pass, memory_drop};
    key_t11 *plain = plain_keys(MEMORY_KEYS);
    key_t11 *crafted = crafted_keys(memory_bytes, &l, MEMORY_KEYS, MEMORY_BITS);
    crafted_vs_plain(&ops, &l, crafted, plain, MEMORY_KEYS, 3);
    free(plain);
    free(crafted);
}

/* ---- the deny cache -------------------------------------------------------- */

/* A cache of DENY_KEYS entries has DENY_KEYS buckets: 11 bits. */
#define DENY_KEYS 2048
#define DENY_BITS 11

static void *deny_make(const porteiro_limit *l, size_t n) {
    (void)l;
    pt_deny_cache *c = pt_deny_cache_new(n);
    assert_non_null(c);
    return c;
}

/* Round 0 puts each key's denial; later rounds look each up (all found),
 * with its call's preparation (the same work for any key: what differs
 * is the chain walked). */
static double deny_pass(void *t, const porteiro_limit *l, key_t11 *keys, size_t n, int round) {
    pt_deny_cache *c = t;
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
    size_t hits = 0;
    double t0 = cpu_s();
    for (size_t i = 0; i < n; i++) {
        (void)pt_call_prepare(&call, PREFIX, strlen(PREFIX), l, 1, keys[i], KEY_LEN, 1,
                              PORTEIRO_NOW, err, sizeof(err));
        porteiro_decision out;
        if (round == 0)
            pt_deny_cache_put(c, &call, 1000, &d);
        else
            hits += pt_deny_cache_get(c, &call, 1001, &out);
    }
    double s = cpu_s() - t0;
    assert_int_equal(round == 0 ? pt_deny_cache_count(c) : hits, n);
    return s;
}

static void deny_drop(void *t, size_t n) {
    (void)n;
    pt_deny_cache_free(t);
}

static void deny_cache_flat(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1, 3600000, 1};
    const table_ops ops = {"deny cache", deny_make, deny_pass, deny_drop};
    key_t11 *plain = plain_keys(DENY_KEYS);
    key_t11 *crafted = crafted_keys(deny_bytes, &l, DENY_KEYS, DENY_BITS);
    crafted_vs_plain(&ops, &l, crafted, plain, DENY_KEYS, 3);
    free(plain);
    free(crafted);
}

/* ---- the top keys ----------------------------------------------------------- */

/* k = 1 024 counters: an index of 4 096 places (12 bits), open addressing.
 * Keys that share 12 bits make one run every add probes along. */
#define TOP_KEYS 1024
#define TOP_BITS 12

static void *top_make(const porteiro_limit *l, size_t n) {
    (void)l;
    pt_topkeys *t = pt_topkeys_new(n);
    assert_non_null(t);
    return t;
}

static double top_pass(void *t, const porteiro_limit *l, key_t11 *keys, size_t n, int round) {
    (void)l;
    (void)round;
    double t0 = cpu_s();
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < n; i++)
            pt_topkeys_add(t, PT_TOP_ALLOWED, keys[i], KEY_LEN, 1, 5000);
    return cpu_s() - t0;
}

static void top_drop(void *t, size_t n) {
    (void)n;
    pt_topkeys_free(t);
}

static void top_keys_flat(void **state) {
    (void)state;
    const table_ops ops = {"top keys", top_make, top_pass, top_drop};
    key_t11 *plain = plain_keys(TOP_KEYS);
    key_t11 *crafted = crafted_keys(top_bytes, NULL, TOP_KEYS, TOP_BITS);
    crafted_vs_plain(&ops, NULL, crafted, plain, TOP_KEYS, 3);
    free(plain);
    free(crafted);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(quota_table_flat, own_key_again),
        cmocka_unit_test(quota_table_bounded),
        cmocka_unit_test_teardown(memory_store_flat, own_key_again),
        cmocka_unit_test_teardown(deny_cache_flat, own_key_again),
        cmocka_unit_test_teardown(top_keys_flat, own_key_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
