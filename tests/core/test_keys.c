/* test_keys.c — client keys are binary-safe and stay apart, on both
 * backends: spaces, newlines, braces, UTF-8, NUL and other bytes; keys one
 * byte apart never share state; a key of any length is limited, under the
 * Redis key layout docs/cluster.md states (a digest beyond 512 bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <openssl/sha.h>
#include <stdlib.h>

#include "test_util.h"

typedef struct bkey {
    const char *bytes;
    size_t len;
} bkey;

#define K(s)                                                                                       \
    { s, sizeof(s) - 1 }
static const bkey keys[] = {
    K("a"),
    K("b"),
    K("a b"),
    K("a\nb"),
    K("a\r\nb"),
    K("{a}"),
    K("{"),
    K("}"),
    K("a}"),
    K("{a"),
    K("}{"),
    K("a}:fw"),
    K("ção"),
    K("日本"),
    K("\xf0\x9f\x9a\xaa"),
    K("\0"),
    K("\0\0"),
    K("a\0"),
    K("a\0b"),
    K("a\0c"),
    K("\xff"),
    K("\xfe\xff"),
    K("\x01\x02\x7f"),
    K("*"),
    K("a*"),
    K("?"),
    K("[a]"),
    K("\\"),
    K("a:b"),
    K(" "),
    K("\t"),
    K("%s%n"),
    K("a b "),
    K("A"),
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static const porteiro_limit one_per_hour = {PORTEIRO_FIXED_WINDOW, 1, 3600000, 0};

static porteiro_status check_key(porteiro_t *p, const void *key, size_t len, int64_t cost,
                                 porteiro_decision *d) {
    porteiro_request req = {.limits = &one_per_hour,
                            .nlimits = 1,
                            .key = key,
                            .key_len = len,
                            .cost = cost,
                            .now_ms = 7200000,
                            .max_wait_ms = 0};
    return porteiro_check_request(p, &req, d);
}

/* Each key's first check passes (no other key shared its state), the
 * second is denied (its own state was kept). */
static void keys_stay_apart(porteiro_t *p, const char *backend) {
    porteiro_decision d;
    for (size_t i = 0; i < NKEYS; i++) {
        TU_EQ(check_key(p, keys[i].bytes, keys[i].len, 1, &d), PORTEIRO_OK, "%s: key %zu: %s",
              backend, i, porteiro_errmsg(p));
        TU_EQ(d.allowed, 1, "%s: key %zu shares state with an earlier one", backend, i);
    }
    for (size_t i = 0; i < NKEYS; i++) {
        TU_EQ(check_key(p, keys[i].bytes, keys[i].len, 1, &d), PORTEIRO_OK, "%s", backend);
        TU_EQ(d.allowed, 0, "%s: key %zu lost its state", backend, i);
    }
    /* Resetting one key leaves the keys one byte away alone. */
    TU_EQ(porteiro_reset(p,
                         &(porteiro_request){
                             .limits = &one_per_hour, .nlimits = 1, .key = "a\0b", .key_len = 3}),
          PORTEIRO_OK, "%s", backend);
    TU_EQ(check_key(p, "a\0b", 3, 1, &d), PORTEIRO_OK, "");
    TU_EQ(d.allowed, 1, "%s: reset key", backend);
    TU_EQ(check_key(p, "a\0c", 3, 1, &d), PORTEIRO_OK, "");
    TU_EQ(d.allowed, 0, "%s: neighbour of the reset key", backend);
    TU_EQ(check_key(p, "a\0", 2, 1, &d), PORTEIRO_OK, "");
    TU_EQ(d.allowed, 0, "%s: prefix of the reset key", backend);
}

static void binary_keys_memory(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "keys", 0);
    keys_stay_apart(p, "memory");
    porteiro_free(p);
}

/* The Redis key of a client key under prefix (docs/cluster.md, "Keys"),
 * up to the descriptor: prefix ":{" key "}:" for a key of 1..512 bytes
 * without '}', else prefix ":{" HEAD "}#" SHA ":" (HEAD: its bytes before
 * the first '}', at most 64, "%" when none; SHA: the hex SHA-256 of the
 * whole key, computed here by OpenSSL). Returns its length. */
static size_t stored_name(const char *prefix, const void *key, size_t len, char *out) {
    size_t n = strlen(prefix);
    memcpy(out, prefix, n);
    memcpy(out + n, ":{", 2);
    n += 2;
    if (len <= PORTEIRO_MAX_KEY_LEN && memchr(key, '}', len) == NULL) {
        memcpy(out + n, key, len);
        memcpy(out + n + len, "}:", 2);
        return n + len + 2;
    }
    const char *k = key;
    size_t head = 0;
    while (head < len && head < 64 && k[head] != '}')
        head++;
    memcpy(out + n, head > 0 ? k : "%", head > 0 ? head : 1);
    n += head > 0 ? head : 1;
    memcpy(out + n, "}#", 2);
    n += 2;
    unsigned char sum[SHA256_DIGEST_LENGTH];
    SHA256(key, len, sum);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        n += (size_t)sprintf(out + n, "%02x", sum[i]);
    out[n++] = ':';
    return n;
}

/* How many stored names are exactly want (want_len bytes). */
static size_t count_stored(const tu_keys *stored, const char *want, size_t want_len) {
    size_t found = 0;
    for (size_t k = 0; k < stored->n; k++)
        found += stored->lens[k] == want_len && memcmp(stored->names[k], want, want_len) == 0;
    return found;
}

/* On Redis, also: one stored key per client key, named as docs/cluster.md
 * says: a key of up to 512 bytes without '}' exactly as older versions
 * named it (its counts carry on), the others as their digest. */
static void binary_keys_redis(void **state) {
    (void)state;
    porteiro_t *p = tu_open(group_redis.url, "keys", 0);
    redisContext *c = tu_redis(&group_redis);
    freeReplyObject(tu_cmd(c, "FLUSHALL"));
    keys_stay_apart(p, "redis");
    /* And the reset's mark next to the fixed window it reset (quota
     * leases' late give-backs, docs/quota_leasing.md). */
    TU_EQ(tu_cmd_int(c, "DBSIZE"), NKEYS + 1, "one stored key per client key");

    tu_keys stored;
    tu_scan(c, "keys:*", &stored);
    for (size_t i = 0; i < NKEYS; i++) {
        char want[256];
        size_t n = stored_name("keys", keys[i].bytes, keys[i].len, want);
        memcpy(want + n, "fw:3600000", 10);
        TU_EQ(count_stored(&stored, want, n + 10), 1, "key %zu", i);
    }
    tu_keys_free(&stored);
    redisFree(c);
    porteiro_free(p);
}

/* A key of any length is limited: 512 bytes as it is, 513, 600, 10 000 and
 * 100 000 bytes (the digest form), each exactly (one pass, then denied),
 * each apart from a key one byte away (its last byte, or its first) and
 * from the others; the empty key is still PORTEIRO_ERR_KEY and writes
 * nothing. */
static void long_keys(void **state) {
    (void)state;
    static const size_t lens[] = {PORTEIRO_MAX_KEY_LEN, PORTEIRO_MAX_KEY_LEN + 1, 600, 10000,
                                  100000};
    enum { NL = sizeof(lens) / sizeof(lens[0]) };
    char *big = malloc(100001);
    assert_non_null(big);
    memset(big, 'x', 100001);
    big[0] = '\0'; /* binary, too */
    redisContext *c = tu_redis(&group_redis);
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(b ? group_redis.url : NULL, "bound", 0);
        const char *be = b ? "redis" : "memory";
        porteiro_decision d;
        freeReplyObject(tu_cmd(c, "FLUSHALL"));
        for (size_t i = 0; i < NL; i++) {
            TU_EQ(check_key(p, big, lens[i], 1, &d), PORTEIRO_OK, "%s %zu: %s", be, lens[i],
                  porteiro_errmsg(p));
            TU_EQ(d.allowed, 1, "%s: the %zu-byte key is fresh", be, lens[i]);
            TU_EQ(check_key(p, big, lens[i], 1, &d), PORTEIRO_OK, "");
            TU_EQ(d.allowed, 0, "%s: the %zu-byte key kept its state", be, lens[i]);
            big[lens[i] - 1] = 'y'; /* its last byte */
            TU_EQ(check_key(p, big, lens[i], 1, &d), PORTEIRO_OK, "");
            TU_EQ(d.allowed, 1, "%s: %zu bytes, the last one apart", be, lens[i]);
            big[lens[i] - 1] = 'x';
            big[0] = 'z'; /* its first byte */
            TU_EQ(check_key(p, big, lens[i], 1, &d), PORTEIRO_OK, "");
            TU_EQ(d.allowed, 1, "%s: %zu bytes, the first one apart", be, lens[i]);
            big[0] = '\0';
        }
        /* Peeks, refunds, resets and leases take long keys too. */
        TU_EQ(check_key(p, big, 10000, 0, &d), PORTEIRO_OK, "peek");
        TU_EQ(d.remaining, 0, "the peek reads the 10 000-byte key's state");
        TU_EQ(porteiro_reset(p, &(porteiro_request){.limits = &one_per_hour,
                                                    .nlimits = 1,
                                                    .key = big,
                                                    .key_len = 10000}),
              PORTEIRO_OK, "%s", porteiro_errmsg(p));
        TU_EQ(check_key(p, big, 10000, 0, &d), PORTEIRO_OK, "peek");
        TU_EQ(d.remaining, 1, "reset");
        TU_EQ(check_key(p, big, 10000, 1, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 1, "fresh after the reset");
        char id[PORTEIRO_LEASE_ID_LEN + 1];
        TU_EQ(porteiro_acquire(p, 1, 60000, big, 600, 7200000, &d, id), PORTEIRO_OK, "%s",
              porteiro_errmsg(p));
        TU_EQ(d.allowed, 1, "a lease on a 600-byte key");
        TU_EQ(porteiro_acquire(p, 1, 60000, big, 600, 7200000, &d, id), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 0, "its one lease is taken");
        if (b) {
            /* Each key's Redis key is bounded and named as documented. */
            tu_keys stored;
            tu_scan(c, "bound:*", &stored);
            for (size_t k = 0; k < stored.n; k++)
                TU_EQ(stored.lens[k] <= 6 + 2 + 512 + 1 + 30, 1, "a bounded Redis key");
            for (size_t i = 0; i < NL; i++) {
                char want[700];
                size_t n = stored_name("bound", big, lens[i], want);
                memcpy(want + n, "fw:3600000", 10);
                TU_EQ(count_stored(&stored, want, n + 10), 1, "the %zu-byte key", lens[i]);
            }
            tu_keys_free(&stored);
        }

        memset(&d, 0x5a, sizeof(d));
        TU_EQ(check_key(p, "", 0, 1, &d), PORTEIRO_ERR_KEY, "");
        assert_non_null(strstr(porteiro_errmsg(p), "empty"));
        TU_EQ(d.remaining, 0x5a5a5a5a5a5a5a5aLL, "the decision is left untouched");
        TU_EQ(check_key(p, NULL, 0, 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(check_key(p, NULL, 5, 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(porteiro_check(p, &one_per_hour, "", 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(porteiro_check(p, &one_per_hour, NULL, 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(porteiro_reset(p,
                             &(porteiro_request){
                                 .limits = &one_per_hour, .nlimits = 1, .key = "", .key_len = 0}),
              PORTEIRO_ERR_KEY, "");
        porteiro_free(p);
    }
    free(big);
    redisFree(c);
}

/* A key holding a '}' keeps the Redis Cluster slot older versions gave it
 * (the bytes before its first '}' are the hash tag), and never meets the
 * keys of a multi-key check: "t}:i" checked alone and the item "i}" of tag
 * "t" were one Redis key before (prefix:{t}:i}:fw:P). */
static void braces_never_meet(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(b ? group_redis.url : NULL, "br", 0);
        porteiro_decision d;
        if (b)
            TU_EQ(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0, "");
        porteiro_item it = {one_per_hour, "i}", 2, 1, false, NULL};
        porteiro_multi_request m = {
            .tag = "t", .tag_len = 1, .items = &it, .nitems = 1, .now_ms = 7200000};
        TU_EQ(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d), PORTEIRO_OK, "%s",
              porteiro_errmsg(p));
        TU_EQ(d.allowed, 1, "the item");
        TU_EQ(check_key(p, "t}:i", 4, 1, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 1, "the single key \"t}:i\" has a state of its own");
        /* A tag holding '}' and an item: ("a}:b", "c") and ("a", "b}:c") were
         * both prefix:{a}:b}:c:fw:P. */
        porteiro_item it2 = {one_per_hour, "c", 1, 1, false, NULL};
        porteiro_multi_request m2 = {
            .tag = "a}:b", .tag_len = 4, .items = &it2, .nitems = 1, .now_ms = 7200000};
        TU_EQ(porteiro_check_request(p, &(porteiro_request){.multi = &m2}, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 1, "");
        porteiro_item it3 = {one_per_hour, "b}:c", 4, 1, false, NULL};
        porteiro_multi_request m3 = {
            .tag = "a", .tag_len = 1, .items = &it3, .nitems = 1, .now_ms = 7200000};
        TU_EQ(porteiro_check_request(p, &(porteiro_request){.multi = &m3}, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 1, "tag \"a\", item \"b}:c\" has a state of its own");
        if (b) {
            /* "{victim}3": the slot of "{victim", as before. */
            redisContext *c = tu_redis(&group_redis);
            tu_keys stored;
            TU_EQ(check_key(p, "{victim}3", 9, 1, &d), PORTEIRO_OK, "");
            tu_scan(c, "br:{{victim}#*", &stored);
            TU_EQ(stored.n, 1, "the key of \"{victim}3\" has the hash tag {victim");
            tu_keys_free(&stored);
            redisFree(c);
        }
        porteiro_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(binary_keys_memory),
        cmocka_unit_test(binary_keys_redis),
        cmocka_unit_test(long_keys),
        cmocka_unit_test(braces_never_meet),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
