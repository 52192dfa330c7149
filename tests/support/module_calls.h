/* module_calls.h — what the module's fuzz tests start from (header only):
 * a valid call of every command of porteiro.so (docs/module.md; '' is an
 * empty argument), edge values, and one mutation step. Used against a real
 * redis-server (test_module.c) and in-process (test_module_api.c); with
 * hiredis included first, the comparison of two replies. */
#ifndef TEST_MODULE_CALLS_H
#define TEST_MODULE_CALLS_H

#include <stdint.h>
#include <string.h>

static const char *const pm_valid_calls[] = {
    "porteiro.fixed_window 1 k 1 10 1000",
    "porteiro.token_bucket 1 k2 1 10 1000 20 1700000000000",
    "porteiro.gcra 1 k3 2 10 1000 20",
    "porteiro.sliding_window 1 k4 1 10 1000",
    "porteiro.policy 2 a b '' 1 1 10 1000 10 3 5 1000 5",
    "porteiro.check 2 a2 b2 '' -1 2 10 1000 10 4 5 1000 5",
    "porteiro.check 1 a3 1700000000000 2 3 10 1000 10",
    "porteiro.batch 2 x y 2 '' 1 1 3 10 1000 5 '' 1 1 1 10 1000 10",
    "porteiro.batch.gcra 2 x3 y3 '' 0 0 1 10 1000 5",
    "porteiro.batch.fixed_window 2 x1 y1 '' 3 0 1 10 1000 2 10 1000",
    "porteiro.batch.token_bucket 0 '' 0 2 t1 t2 1 10 1000 5",
    "porteiro.batch.sliding_window 1 s4 '' 0 0 1 10 1000",
    "porteiro.reset 2 a b",
    "porteiro.lease 2 la lb '' q1:20:5:1700000000000 1 10 1000 10 3 5 1000 5",
    ("porteiro.lease 1 la '' q1:20:5:1700000000000:5e1ec7ed0000000000000000000000000000abcd 1 "
     "10 1000 10"),
};
#define PM_VALID_CALLS (sizeof(pm_valid_calls) / sizeof(pm_valid_calls[0]))

static const char *const pm_edge_words[] = {"0",
                                            "1",
                                            "2",
                                            "3",
                                            "4",
                                            "5",
                                            "-1",
                                            "''",
                                            "10",
                                            "1000",
                                            "60000",
                                            "1000000000",
                                            "1000000001",
                                            "31622400000",
                                            "9223372036854775807",
                                            "-9223372036854775808",
                                            "1e3",
                                            "x",
                                            "h",
                                            "s24",
                                            "k",
                                            "1125899906842624",
                                            "2.5",
                                            "8",
                                            "9",
                                            "256",
                                            "-1000000000",
                                            "00",
                                            "+1",
                                            "99999999999999999999",
                                            "1700000000000"};

static inline uint64_t pm_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One change to the words w[0..n) (room for max), never to w[0], the
 * command: a word replaced by an edge value, dropped or added. The new n. */
static inline int pm_mutate(char **w, int n, int max, uint64_t *rng) {
    int at = n > 1 ? 1 + (int)(pm_next(rng) % (uint64_t)(n - 1)) : 1;
    char *word =
        (char *)pm_edge_words[pm_next(rng) % (sizeof(pm_edge_words) / sizeof(pm_edge_words[0]))];
    int how = (int)(pm_next(rng) % 4);
    if (how == 0 && n > 1) {
        memmove(&w[at], &w[at + 1], (size_t)(n - at - 1) * sizeof(w[0]));
        return n - 1;
    }
    if (how == 1 && n < max) {
        memmove(&w[at + 1], &w[at], (size_t)(n - at) * sizeof(w[0]));
        w[at] = word;
        return n + 1;
    }
    if (n > 1)
        w[at] = word;
    return n;
}

#ifdef __HIREDIS_H /* for the tests that talk to a real redis-server */
#include <stdbool.h>
#include <stdio.h>

/* Two replies equal in type and value, recursively: the module's answer
 * against the script's. */
static inline bool pm_same_reply(const redisReply *a, const redisReply *b) {
    if (a->type != b->type)
        return false;
    switch (a->type) {
        case REDIS_REPLY_INTEGER: return a->integer == b->integer;
        case REDIS_REPLY_ARRAY:
            if (a->elements != b->elements)
                return false;
            for (size_t i = 0; i < a->elements; i++)
                if (!pm_same_reply(a->element[i], b->element[i]))
                    return false;
            return true;
        case REDIS_REPLY_NIL: return true;
        default: return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    }
}

static inline void pm_print_reply(const char *name, const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER)
        fprintf(stderr, "%s: %lld\n", name, r->integer);
    else if (r->type == REDIS_REPLY_ARRAY)
        fprintf(stderr, "%s: array of %zu\n", name, r->elements);
    else
        fprintf(stderr, "%s: type %d %.*s\n", name, r->type, (int)r->len, r->str ? r->str : "");
}
#endif

#endif
