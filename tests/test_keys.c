/* test_keys.c — client keys are binary-safe and stay apart, on both
 * backends: spaces, newlines, braces, UTF-8, NUL and other bytes; keys one
 * byte apart never share state; the length bound is exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"


typedef struct bkey {
    const char *bytes;
    size_t len;
} bkey;

#define K(s) {s, sizeof(s) - 1}
static const bkey keys[] = {
    K("a"),        K("b"),          K("a b"),        K("a\nb"),      K("a\r\nb"),
    K("{a}"),      K("{"),          K("}"),          K("a}"),        K("{a"),
    K("}{"),       K("a}:fw"),      K("ção"),        K("日本"),      K("\xf0\x9f\x9a\xaa"),
    K("\0"),       K("\0\0"),       K("a\0"),        K("a\0b"),      K("a\0c"),
    K("\xff"),     K("\xfe\xff"),   K("\x01\x02\x7f"), K("*"),       K("a*"),
    K("?"),        K("[a]"),        K("\\"),         K("a:b"),       K(" "),
    K("\t"),       K("%s%n"),       K("a b "),       K("A"),
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static const porteiro_limit one_per_hour = {PORTEIRO_FIXED_WINDOW, 1, 3600000, 0};

static porteiro_status check_key(porteiro_t *p, const void *key, size_t len, int64_t cost,
                                 porteiro_decision *d) {
    porteiro_request req = {&one_per_hour, 1, key, len, cost, 7200000, 0};
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
    TU_EQ(porteiro_reset(p, &one_per_hour, 1, "a\0b", 3), PORTEIRO_OK, "%s", backend);
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

/* On Redis, also: one stored key per client key, named <prefix>:{<key>}:...
 * with the client's bytes copied exactly. */
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
        char want[64];
        size_t n = 0;
        memcpy(want, "keys:{", 6);
        n = 6;
        /* A key that would close the hash tag at once (%*}) is stored
         * with one '%' in front (core/call.c, docs/cluster.md). */
        size_t pct = 0;
        while (pct < keys[i].len && keys[i].bytes[pct] == '%')
            pct++;
        if (pct < keys[i].len && keys[i].bytes[pct] == '}')
            want[n++] = '%';
        memcpy(want + n, keys[i].bytes, keys[i].len);
        n += keys[i].len;
        memcpy(want + n, "}:", 2);
        n += 2;
        size_t found = 0;
        /* The limit's descriptor follows and holds no '}' (so "a}:fw",
         * stored as "keys:{a}:fw}:...", is not taken for "a"). */
        const size_t mark = sizeof(":reset") - 1;
        for (size_t k = 0; k < stored.n; k++)
            found += stored.lens[k] > n && memcmp(stored.names[k], want, n) == 0 &&
                     memchr(stored.names[k] + n, '}', stored.lens[k] - n) == NULL &&
                     !(stored.lens[k] > mark &&
                       memcmp(stored.names[k] + stored.lens[k] - mark, ":reset", mark) == 0);
        TU_EQ(found, 1, "key %zu", i);
    }
    tu_keys_free(&stored);
    redisFree(c);
    porteiro_free(p);
}

/* 512 bytes pass, 513 fail with PORTEIRO_ERR_KEY and write nothing; the
 * empty key fails too. */
static void key_length_bound(void **state) {
    (void)state;
    char big[PORTEIRO_MAX_KEY_LEN + 1];
    memset(big, 'x', sizeof(big));
    big[0] = '\0'; /* binary, too */
    redisContext *c = tu_redis(&group_redis);
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(b ? group_redis.url : NULL, "bound", 0);
        porteiro_decision d;
        freeReplyObject(tu_cmd(c, "FLUSHALL"));
        TU_EQ(check_key(p, big, PORTEIRO_MAX_KEY_LEN, 1, &d), PORTEIRO_OK, "%s",
              porteiro_errmsg(p));
        TU_EQ(d.allowed, 1, "");
        TU_EQ(check_key(p, big, PORTEIRO_MAX_KEY_LEN, 1, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 0, "the 512-byte key kept its state");
        if (b)
            TU_EQ(tu_cmd_int(c, "DBSIZE"), 1, "");

        memset(&d, 0x5a, sizeof(d));
        TU_EQ(check_key(p, big, PORTEIRO_MAX_KEY_LEN + 1, 1, &d), PORTEIRO_ERR_KEY, "");
        assert_non_null(strstr(porteiro_errmsg(p), "512"));
        TU_EQ(d.remaining, 0x5a5a5a5a5a5a5a5aLL, "the decision is left untouched");
        TU_EQ(check_key(p, big, PORTEIRO_MAX_KEY_LEN + 1, 0, &d), PORTEIRO_ERR_KEY, "peek too");
        TU_EQ(check_key(p, "", 0, 1, &d), PORTEIRO_ERR_KEY, "");
        assert_non_null(strstr(porteiro_errmsg(p), "empty"));
        TU_EQ(check_key(p, NULL, 0, 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(check_key(p, NULL, 5, 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(porteiro_check(p, &one_per_hour, "", 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(porteiro_check(p, &one_per_hour, NULL, 1, &d), PORTEIRO_ERR_KEY, "");
        TU_EQ(porteiro_reset(p, &one_per_hour, 1, big, PORTEIRO_MAX_KEY_LEN + 1), PORTEIRO_ERR_KEY,
              "");
        TU_EQ(porteiro_reset(p, &one_per_hour, 1, "", 0), PORTEIRO_ERR_KEY, "");
        if (b)
            TU_EQ(tu_cmd_int(c, "DBSIZE"), 1, "nothing written by the refused checks");
        porteiro_free(p);
    }
    redisFree(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(binary_keys_memory),
        cmocka_unit_test(binary_keys_redis),
        cmocka_unit_test(key_length_bound),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
