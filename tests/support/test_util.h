/* test_util.h — small helpers shared by the tests (header only).
 *
 * Include after <cmocka.h>. Every helper fails the running test on error,
 * so the tests read as sequences of expectations. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "redis_server.h"

/* Compares two int64 values and names the context on failure. */
#define TU_EQ(got, want, ...)                                                                      \
    do {                                                                                           \
        int64_t tu_g_ = (int64_t)(got), tu_w_ = (int64_t)(want);                                   \
        if (tu_g_ != tu_w_) {                                                                      \
            print_error("%s:%d: %s = %" PRId64 ", want %" PRId64 " (", __FILE__, __LINE__, #got,   \
                        tu_g_, tu_w_);                                                             \
            print_error("ctx: " __VA_ARGS__);                                                      \
            print_error(")\n");                                                                    \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

/* A limiter for tests: Redis failures are errors (never a silent fallback
 * decision), no breaker, and budgets generous enough for sanitizer builds
 * on a loaded machine. url NULL: the memory backend. */
static inline porteiro_t *tu_open(const char *url, const char *prefix, size_t max_keys) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.prefix = prefix;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.breaker_failures = -1;
    o.connect_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
    o.memory_max_keys = max_keys;
    if (url != NULL)
        o.tls_ca_file = test_group_ca; /* NULL unless built with PT_TEST_TLS */
    char err[256] = "";
    porteiro_status st = PORTEIRO_OK;
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    if (p == NULL) {
        print_error("porteiro_new(%s): %d %s\n", url ? url : "memory", (int)st, err);
        fail();
    }
    return p;
}

/* A limiter with the library's defaults but for on_error = mode and a
 * short connect timeout: for tests of what a failure turns into. */
static inline porteiro_t *tu_open_mode(const char *url, porteiro_on_error mode) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = mode;
    o.connect_timeout_ms = 100;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    return p;
}

/* A direct hiredis connection to a test server, to inspect what was written. */
static inline redisContext *tu_redis(const test_redis *r) {
    redisContext *c = redisConnect("127.0.0.1", r->port);
    if (c == NULL || c->err) {
        print_error("redisConnect: %s\n", c ? c->errstr : "out of memory");
        fail();
    }
    return c;
}

/* Runs a command and returns its reply (never NULL, never an error reply). */
static inline redisReply *tu_cmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *reply = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        print_error("redis %s: %s\n", fmt, reply ? reply->str : c->errstr);
        fail();
    }
    return reply;
}

static inline long long tu_cmd_int(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *reply = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        print_error("redis %s: not an integer\n", fmt);
        fail();
    }
    long long v = reply->integer;
    freeReplyObject(reply);
    return v;
}

/* The keys matching pattern (binary-safe), collected with SCAN. The caller
 * frees the result with tu_keys_free. */
typedef struct tu_keys {
    size_t n;
    char *names[512];
    size_t lens[512];
} tu_keys;

static inline void tu_keys_free(tu_keys *k) {
    for (size_t i = 0; i < k->n; i++)
        free(k->names[i]);
    k->n = 0;
}

static inline void tu_scan(redisContext *c, const char *pattern, tu_keys *out) {
    char cursor[32] = "0";
    out->n = 0;
    do {
        redisReply *r = tu_cmd(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            redisReply *k = r->element[1]->element[i];
            if (out->n == sizeof(out->names) / sizeof(out->names[0])) {
                print_error("tu_scan: too many keys\n");
                fail();
            }
            out->names[out->n] = malloc(k->len + 1);
            memcpy(out->names[out->n], k->str, k->len + 1);
            out->lens[out->n++] = k->len;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

#endif
