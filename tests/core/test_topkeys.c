/* test_topkeys.c — the heavy hitters structure (src/core/topkeys.c) against
 * an exact count: Zipf (s = 1) over 100 000 keys, 1 000 000 decisions of
 * random cost 1..3. With the default k = 64: every reported count is an
 * upper bound within its error of the truth, every error within N/k, and
 * every key above N/k is reported (Space-Saving's guarantee; on this
 * traffic that is the top 5). With k = 256 the true top 10 come out in
 * order (at k = 64 the 7th key, 1.2 % of the traffic, is below N/k = 1.6 %
 * and may not). The same holds for the merge of several intervals and of
 * two handles; memory stays the same while distinct keys grow 100x
 * (and feeding allocates nothing); the windows forget what is older; a
 * key crafted to collide with another under the old (invertible) hash is
 * counted under its own name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/topkeys.h"

#define NKEYS 100000
#define NDECISIONS 1000000
#define K_DEFAULT 64
#define K_ORDER 256
static size_t K = K_DEFAULT;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { /* xorshift64*: deterministic across runs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

static double *zipf_cdf(size_t n, double s) {
    double *cdf = malloc(n * sizeof(*cdf));
    assert_non_null(cdf);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += 1.0 / pow((double)(i + 1), s);
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += 1.0 / pow((double)(i + 1), s) / sum;
        cdf[i] = acc;
    }
    cdf[n - 1] = 1.0;
    return cdf;
}

static size_t zipf_draw(const double *cdf, size_t n) {
    double u = (double)(rnd() >> 11) / 9007199254740992.0;
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Rank r's key: a permutation so that the hottest keys are not "key0..9". */
static int key_of(size_t rank, char *buf) {
    return snprintf(buf, 32, "user:%zu", (rank * 7919) % NKEYS);
}

static size_t find(const pt_top_acc *acc, const char *key, size_t len) {
    for (size_t i = 0; i < acc->n; i++)
        if (acc->e[i].len == len && memcmp(acc->e[i].key, key, len) == 0)
            return i;
    return (size_t)-1;
}

/* Every reported key: truth in [count - error, count], error <= N/k. */
static void check_bounds(const pt_top_acc *acc, const int64_t *truth) {
    int64_t bound = (acc->total + (int64_t)K - 1) / (int64_t)K;
    for (size_t i = 0; i < acc->n; i++) {
        const pt_top_entry *e = &acc->e[i];
        char buf[PT_TOP_KEY_MAX + 1];
        memcpy(buf, e->key, e->len);
        buf[e->len] = '\0';
        size_t id;
        assert_int_equal(sscanf(buf, "user:%zu", &id), 1);
        int64_t t = truth[id];
        if (!(t <= e->count && t >= e->count - e->error && e->error <= bound))
            fail_msg("%s: true %lld, reported %lld error %lld (bound %lld)", buf, (long long)t,
                     (long long)e->count, (long long)e->error, (long long)bound);
    }
}

/* The true top 10 are the first 10 reported, in order. */
static void check_top10(const pt_top_acc *acc, const int64_t *truth) {
    size_t order[10];
    for (size_t r = 0; r < 10; r++) { /* the 10 largest true counts */
        size_t best = 0;
        int64_t bestv = -1;
        for (size_t id = 0; id < NKEYS; id++) {
            bool taken = false;
            for (size_t q = 0; q < r; q++)
                taken = taken || order[q] == id;
            if (!taken && truth[id] > bestv) {
                bestv = truth[id];
                best = id;
            }
        }
        order[r] = best;
    }
    assert_true(acc->n >= 10);
    for (size_t r = 0; r < 10; r++) {
        char key[32];
        int len = snprintf(key, sizeof(key), "user:%zu", order[r]);
        size_t at = find(acc, key, (size_t)len);
        if (at != r)
            fail_msg("true rank %zu (%s, %lld units) reported at %zd", r, key,
                     (long long)truth[order[r]], (ssize_t)at);
    }
}

/* Every key whose true count is above N/k is reported. */
static void check_heavy_present(const pt_top_acc *acc, const int64_t *truth) {
    for (size_t id = 0; id < NKEYS; id++) {
        if (truth[id] * (int64_t)K <= acc->total)
            continue;
        char key[32];
        int len = snprintf(key, sizeof(key), "user:%zu", id);
        if (find(acc, key, (size_t)len) == (size_t)-1)
            fail_msg("%s has %lld of %lld units (> N/k) and is not reported", key,
                     (long long)truth[id], (long long)acc->total);
    }
}

static void zipf_exact_k(size_t k) {
    K = k;
    rng_state = 0x9e3779b97f4a7c15ULL;
    double *cdf = zipf_cdf(NKEYS, 1.0);
    int64_t *truth = calloc(NKEYS, sizeof(*truth));
    pt_topkeys *t = pt_topkeys_new(K);
    assert_non_null(truth);
    assert_non_null(t);
    int64_t now = 1733430000000LL; /* one 10 s interval: nothing leaves */
    now -= now % 60000;
    int64_t total = 0;
    for (size_t i = 0; i < NDECISIONS; i++) {
        size_t rank = zipf_draw(cdf, NKEYS);
        char key[32];
        int len = key_of(rank, key);
        int64_t units = 1 + (int64_t)(rnd() % 3);
        size_t id = (rank * 7919) % NKEYS;
        truth[id] += units;
        total += units;
        pt_topkeys_add(t, PT_TOP_DENIED, key, (size_t)len, units, now + (int64_t)(i % 9000));
    }
    for (int w = 0; w < 2; w++) {
        pt_top_acc acc;
        pt_top_acc_init(&acc);
        pt_top_acc_add(&acc, t, PT_TOP_DENIED, w, now + 9000);
        pt_top_acc_finish(&acc);
        assert_false(acc.nomem);
        assert_int_equal(acc.total, total);
        assert_true(acc.n <= K);
        check_bounds(&acc, truth);
        check_heavy_present(&acc, truth);
        if (K >= K_ORDER)
            check_top10(&acc, truth);
        pt_top_acc_free(&acc);
    }
    /* Nothing was counted as allowed. */
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    pt_top_acc_add(&acc, t, PT_TOP_ALLOWED, PT_TOP_1M, now + 9000);
    assert_int_equal(pt_top_acc_finish(&acc), 0);
    assert_int_equal(acc.total, 0);
    pt_top_acc_free(&acc);
    pt_topkeys_free(t);
    free(truth);
    free(cdf);
}

static void zipf_exact(void **state) {
    (void)state;
    zipf_exact_k(K_DEFAULT);
    zipf_exact_k(K_ORDER);
}

/* Spread over the 1m window's 7 intervals and split between two handles
 * (as two workers): the merge keeps every bound and the order. */
static void zipf_merged_k(size_t k) {
    K = k;
    rng_state = 0x9e3779b97f4a7c15ULL;
    double *cdf = zipf_cdf(NKEYS, 1.0);
    int64_t *truth = calloc(NKEYS, sizeof(*truth));
    pt_topkeys *a = pt_topkeys_new(K), *b = pt_topkeys_new(K);
    assert_non_null(truth);
    int64_t start = 1733430000000LL;
    start -= start % 10000;
    for (size_t i = 0; i < NDECISIONS; i++) {
        size_t rank = zipf_draw(cdf, NKEYS);
        char key[32];
        int len = key_of(rank, key);
        truth[(rank * 7919) % NKEYS] += 1;
        int64_t now = start + (int64_t)(i * 69999 / NDECISIONS); /* 7 intervals */
        pt_topkeys_add((i & 1) ? a : b, PT_TOP_DENIED, key, (size_t)len, 1, now);
    }
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    pt_top_acc_add(&acc, a, PT_TOP_DENIED, PT_TOP_1M, start + 69999);
    pt_top_acc_add(&acc, b, PT_TOP_DENIED, PT_TOP_1M, start + 69999);
    pt_top_acc_finish(&acc);
    assert_int_equal(acc.total, NDECISIONS);
    check_bounds(&acc, truth);
    check_heavy_present(&acc, truth);
    if (K >= K_ORDER)
        check_top10(&acc, truth);
    pt_top_acc_free(&acc);
    pt_topkeys_free(a);
    pt_topkeys_free(b);
    free(truth);
    free(cdf);
}

static void zipf_merged(void **state) {
    (void)state;
    zipf_merged_k(K_DEFAULT);
    zipf_merged_k(K_ORDER);
}

/* 1 000 distinct keys, then 100 000: the same bytes, and feeding takes no
 * memory from malloc at all. */
static void memory_flat(void **state) {
    (void)state;
    K = K_DEFAULT;
    pt_topkeys *t = pt_topkeys_new(K);
    size_t before = pt_topkeys_memory(t);
    struct mallinfo2 m0 = mallinfo2();
    for (size_t distinct = 1000; distinct <= 100000; distinct *= 100)
        for (size_t i = 0; i < 300000; i++) {
            char key[32];
            int len = snprintf(key, sizeof(key), "k%zu", (size_t)(rnd() % distinct));
            pt_topkeys_add(t, PT_TOP_ALLOWED, key, (size_t)len, 1, 5000 + (int64_t)i);
        }
    struct mallinfo2 m1 = mallinfo2();
    assert_int_equal(pt_topkeys_memory(t), before);
    assert_int_equal(m1.uordblks, m0.uordblks);
    /* The stated bound: 2 outcomes x 18 summaries of k counters, ~150 B each. */
    assert_true(before < 2 * 18 * K * 150 + 4096);
    pt_topkeys_free(t);
}

/* The 1m view forgets after 70 s, the 10m view after 11 minutes; a key
 * longer than PT_TOP_KEY_MAX is cut with its hash, and two such keys with
 * the same beginning stay apart. */
static void windows_and_long_keys(void **state) {
    (void)state;
    pt_topkeys *t = pt_topkeys_new(PT_TOP_MIN_K);
    int64_t now = 600000;
    pt_topkeys_add(t, PT_TOP_DENIED, "old", 3, 5, now);
    char longa[200], longb[200];
    memset(longa, 'x', sizeof(longa));
    memset(longb, 'x', sizeof(longb));
    longb[199] = 'y';
    pt_topkeys_add(t, PT_TOP_DENIED, longa, sizeof(longa), 2, now + 1);
    pt_topkeys_add(t, PT_TOP_DENIED, longb, sizeof(longb), 1, now + 1);
    struct {
        int window;
        int64_t at;
        int64_t total;
    } cases[] = {{PT_TOP_1M, now + 69999, 8},
                 {PT_TOP_1M, now + 70000, 0},
                 {PT_TOP_10M, now + 659999, 8},
                 {PT_TOP_10M, now + 660000, 0},
                 {PT_TOP_1M, now - 10000, 0}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        pt_top_acc acc;
        pt_top_acc_init(&acc);
        pt_top_acc_add(&acc, t, PT_TOP_DENIED, cases[c].window, cases[c].at);
        pt_top_acc_finish(&acc);
        assert_int_equal(acc.total, cases[c].total);
        if (cases[c].total > 0) {
            assert_int_equal(acc.n, 3);
            assert_int_equal(acc.e[0].count, 5);
            assert_memory_equal(acc.e[0].key, "old", 3);
            assert_int_equal(acc.e[1].len, PT_TOP_KEY_CUT + 17);
            assert_int_equal(acc.e[1].key[PT_TOP_KEY_CUT], '~');
            assert_int_equal(acc.e[1].count, 2);
            assert_int_equal(acc.e[2].count, 1);
            assert_memory_not_equal(acc.e[1].key, acc.e[2].key, acc.e[1].len);
        }
        pt_top_acc_free(&acc);
    }
    /* Bad input counts nothing and breaks nothing. */
    pt_topkeys_add(t, PT_TOP_DENIED, "", 0, 1, now);
    pt_topkeys_add(t, PT_TOP_DENIED, "a", 1, 0, now);
    pt_topkeys_add(t, PT_TOP_DENIED, "a", 1, -4, now);
    pt_topkeys_add(t, 7, "a", 1, 1, now);
    pt_topkeys_add(t, PT_TOP_DENIED, "a", 1, 1, -1);
    pt_topkeys_add(NULL, PT_TOP_DENIED, "a", 1, 1, now);
    assert_null(pt_topkeys_new(0));
    assert_null(pt_topkeys_new(PT_TOP_MAX_K + 1));
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    pt_top_acc_add(&acc, t, PT_TOP_DENIED, PT_TOP_1M, now);
    pt_top_acc_finish(&acc);
    assert_int_equal(acc.total, 8);
    pt_top_acc_free(&acc);
    pt_topkeys_free(t);
}

/* Space-Saving's eviction path under churn with k = 4: the index stays
 * consistent (every held key is found again, counts add up). */
static void churn_small_k(void **state) {
    (void)state;
    pt_topkeys *t = pt_topkeys_new(PT_TOP_MIN_K);
    int64_t total = 0;
    for (int i = 0; i < 200000; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "%d", (int)(rnd() % (i % 3 == 0 ? 3 : 5000)));
        pt_topkeys_add(t, PT_TOP_ALLOWED, key, (size_t)len, 1, 1000);
        total++;
    }
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    pt_top_acc_add(&acc, t, PT_TOP_ALLOWED, PT_TOP_1M, 1000);
    pt_top_acc_finish(&acc);
    assert_int_equal(acc.n, 4);
    int64_t sum = 0;
    for (size_t i = 0; i < acc.n; i++)
        sum += acc.e[i].count;
    assert_int_equal(sum, total); /* Space-Saving: the counters add up to N */
    /* keys 0, 1, 2 get a third of the traffic each /3 + their share: on top */
    pt_top_acc_free(&acc);
    pt_topkeys_free(t);
}

/* The hash topkeys.c used before it was keyed: a multiply-xor of 8-byte
 * words and murmur3's finalizer, every step invertible. Kept here to show
 * that what it let a client do no longer works. */
static uint64_t old_top_hash(const void *key, size_t len) {
    const unsigned char *b = key;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)len * 0xff51afd7ed558ccdULL);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ (w * 0x87c37b91114253d5ULL)) * 0x4cf5ad432745937fULL;
        h ^= h >> 29;
        b += 8;
        len -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < len; i++)
        w |= (uint64_t)b[i] << (8 * i);
    h = (h ^ (w * 0x87c37b91114253d5ULL)) * 0x4cf5ad432745937fULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* The state of old_top_hash after the first 8-byte word of a 16-byte key. */
static uint64_t old_state_after_word(uint64_t w) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (16 * 0xff51afd7ed558ccdULL);
    h = (h ^ (w * 0x87c37b91114253d5ULL)) * 0x4cf5ad432745937fULL;
    return h ^ (h >> 29);
}

/* A printable 16-byte key other than victim (16 bytes) with the same
 * old_top_hash: its first word is "attacker"-like, its second solves
 * h1a ^ w2a * C1 = h1v ^ w2v * C1 (C1 odd, so invertible mod 2^64); a few
 * thousand first words give a printable second. */
static void aim_at(const char *victim, char out[17]) {
    const uint64_t c1 = 0x87c37b91114253d5ULL;
    uint64_t inv = c1; /* Newton: inv = c1^-1 mod 2^64 */
    for (int i = 0; i < 6; i++)
        inv *= 2 - c1 * inv;
    uint64_t v1, v2;
    memcpy(&v1, victim, 8);
    memcpy(&v2, victim + 8, 8);
    uint64_t target = old_state_after_word(v1) ^ (v2 * c1);
    for (unsigned n = 0; n < 100000000; n++) {
        char first[9];
        snprintf(first, sizeof(first), "at%06u", n % 1000000);
        first[0] = (char)('a' + n / 1000000 % 26);
        uint64_t a1;
        memcpy(&a1, first, 8);
        uint64_t a2 = (old_state_after_word(a1) ^ target) * inv;
        bool printable = true;
        for (int i = 0; i < 8 && printable; i++) {
            unsigned char ch = (unsigned char)(a2 >> (8 * i));
            printable = ch >= 0x21 && ch <= 0x7e;
        }
        if (!printable)
            continue;
        memcpy(out, &a1, 8);
        memcpy(out + 8, &a2, 8);
        out[16] = '\0';
        return;
    }
    fail_msg("no printable key found");
}

/* A client cannot count its traffic under a victim's name: a key built to
 * share the victim's hash under the old, invertible hash is told apart
 * from it now (the hash is keyed by a secret drawn per process). */
static void cannot_be_aimed(void **state) {
    (void)state;
    const char *victim = "victim-user-0001";
    char aimed[17];
    aim_at(victim, aimed);
    assert_string_not_equal(aimed, victim);
    assert_true(old_top_hash(aimed, 16) == old_top_hash(victim, 16)); /* the old hash was aimed */
    pt_topkeys *t = pt_topkeys_new(K_DEFAULT);
    int64_t now = 5000000;
    pt_topkeys_add(t, PT_TOP_DENIED, victim, 16, 3, now);
    pt_topkeys_add(t, PT_TOP_DENIED, aimed, 16, 1000, now);
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    pt_top_acc_add(&acc, t, PT_TOP_DENIED, PT_TOP_1M, now);
    assert_int_equal(pt_top_acc_finish(&acc), 2);
    /* The attacker's units under its own name, the victim's 3 under its. */
    assert_int_equal(acc.e[0].len, 16);
    assert_memory_equal(acc.e[0].key, aimed, 16);
    assert_int_equal(acc.e[0].count, 1000);
    assert_int_equal(acc.e[1].len, 16);
    assert_memory_equal(acc.e[1].key, victim, 16);
    assert_int_equal(acc.e[1].count, 3);
    pt_top_acc_free(&acc);
    pt_topkeys_free(t);
}

/* A long key is cut at a UTF-8 character boundary: "a" then 2-byte
 * characters puts one across byte 44; it is left out whole. */
static void long_keys_cut_at_characters(void **state) {
    (void)state;
    char key[128];
    size_t n = 0;
    key[n++] = 'a';
    for (int i = 0; i < 35; i++) { /* U+00E9, C3 A9 */
        key[n++] = (char)0xc3;
        key[n++] = (char)0xa9;
    }
    pt_topkeys *t = pt_topkeys_new(PT_TOP_MIN_K);
    pt_topkeys_add(t, PT_TOP_DENIED, key, n, 1, 1000);
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    pt_top_acc_add(&acc, t, PT_TOP_DENIED, PT_TOP_1M, 1000);
    assert_int_equal(pt_top_acc_finish(&acc), 1);
    assert_int_equal(acc.e[0].len, 43 + 17);
    assert_memory_equal(acc.e[0].key, key, 43);
    assert_int_equal(acc.e[0].key[43], '~');
    pt_top_acc_free(&acc);
    pt_topkeys_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(zipf_exact),
        cmocka_unit_test(zipf_merged),
        cmocka_unit_test(memory_flat),
        cmocka_unit_test(windows_and_long_keys),
        cmocka_unit_test(churn_small_k),
        cmocka_unit_test(cannot_be_aimed),
        cmocka_unit_test(long_keys_cut_at_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
