/* test_scenarios.c — the scenario table (scenarios.h) on both backends.
 *
 * The memory backend runs the C arithmetic; Redis runs the Lua twin. Both go
 * through the public API with an injected clock. On Redis the test also
 * checks what was stored: a denied check or a peek changes no key, and every
 * write leaves a TTL no longer than the state's life (the decision's reset).
 * Keys are then made persistent so that a slow (sanitizer) run cannot see
 * real-time expiry in the middle of a scenario that uses injected time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>

#include "porteiro_libevent.h"
#include "scenarios.h"
#include "test_util.h"

static int64_t capacity(const porteiro_limit *l) {
    bool burst = l->algorithm == PORTEIRO_TOKEN_BUCKET || l->algorithm == PORTEIRO_GCRA;
    return burst && l->burst > 0 ? l->burst : l->limit;
}

/* A key's contents: a string value (in a one-element array: "a:b[:c]"),
 * or the members and scores of a sorted set (sliding_log). */
static redisReply *contents(redisContext *c, const char *name, size_t len) {
    redisReply *type = tu_cmd(c, "TYPE %b", name, len);
    bool zset = type->type == REDIS_REPLY_STATUS && strcmp(type->str, "zset") == 0;
    freeReplyObject(type);
    return zset ? tu_cmd(c, "ZRANGE %b 0 -1 WITHSCORES", name, len)
                : tu_cmd(c, "EVAL %s 1 %b", "return {redis.call('GET', KEYS[1])}", name, len);
}

/* Every key under the prefix and its contents, as one comparable text. */
static char *snapshot(redisContext *c, const char *prefix) {
    char pattern[64];
    tu_keys keys;
    snprintf(pattern, sizeof(pattern), "%s:*", prefix);
    tu_scan(c, pattern, &keys);
    size_t cap = 64, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < keys.n; i++) {
        redisReply *r = contents(c, keys.names[i], keys.lens[i]);
        for (size_t j = 0; j <= r->elements; j++) {
            const char *s = j == 0 ? keys.names[i] : r->element[j - 1]->str;
            size_t n = j == 0 ? keys.lens[i] : r->element[j - 1]->len;
            while (len + n + 2 > cap)
                out = realloc(out, cap *= 2);
            memcpy(out + len, s, n);
            len += n;
            out[len++] = j == r->elements ? '\n' : ' ';
            out[len] = '\0';
        }
        freeReplyObject(r);
    }
    tu_keys_free(&keys);
    return out;
}

/* After a write: nlimits keys, each with 0 < PTTL <= reset; then PERSIST. */
static void check_ttls(redisContext *c, const char *prefix, const scenario *s, size_t step,
                       int64_t reset_ms) {
    char pattern[64];
    tu_keys keys;
    snprintf(pattern, sizeof(pattern), "%s:*", prefix);
    tu_scan(c, pattern, &keys);
    TU_EQ(keys.n, s->nlimits, "%s, step %zu: keys stored", s->name, step);
    for (size_t i = 0; i < keys.n; i++) {
        long long pttl = tu_cmd_int(c, "PTTL %b", keys.names[i], keys.lens[i]);
        if (pttl <= 0 || pttl > reset_ms) {
            print_error("%s, step %zu: PTTL %lld, reset %lld\n", s->name, step, pttl,
                        (long long)reset_ms);
            fail();
        }
        /* One limit: the TTL is exactly the state's life (less real time). */
        if (s->nlimits == 1 && pttl < reset_ms - 1000) {
            print_error("%s, step %zu: PTTL %lld is shorter than reset %lld\n", s->name, step, pttl,
                        (long long)reset_ms);
            fail();
        }
        tu_cmd_int(c, "PERSIST %b", keys.names[i], keys.lens[i]);
    }
    tu_keys_free(&keys);
}

static void expect_step(const scenario *s, size_t i, const porteiro_decision *d,
                        const char *backend) {
    const sc_step *w = &s->steps[i];
    int denied_by = s->nlimits == 1 ? (w->allowed ? -1 : 0) : w->denied_by;

    TU_EQ(d->allowed, w->allowed, "%s: %s, step %zu", backend, s->name, i);
    TU_EQ(d->remaining, w->remaining, "%s: %s, step %zu", backend, s->name, i);
    TU_EQ(d->reset_ms, w->reset_ms, "%s: %s, step %zu", backend, s->name, i);
    TU_EQ(d->retry_after_ms, w->retry_after_ms, "%s: %s, step %zu", backend, s->name, i);
    TU_EQ(d->denied_by, denied_by, "%s: %s, step %zu", backend, s->name, i);
    TU_EQ(d->nlimits, s->nlimits, "%s: %s, step %zu", backend, s->name, i);
    TU_EQ(d->fallback, PORTEIRO_FALLBACK_NONE, "%s: %s, step %zu", backend, s->name, i);
    if (s->nlimits == 1) {
        TU_EQ(d->limit, capacity(&s->limits[0]), "%s: %s, step %zu", backend, s->name, i);
        return;
    }
    /* The policy reports the limit with the least remaining (the first). */
    size_t lowest = 0;
    for (size_t k = 0; k < s->nlimits; k++) {
        TU_EQ(d->limits[k].remaining, w->per[k], "%s: %s, step %zu, limit %zu", backend, s->name, i,
              k);
        if (w->per[k] < w->per[lowest])
            lowest = k;
    }
    TU_EQ(d->limit, capacity(&s->limits[lowest]), "%s: %s, step %zu", backend, s->name, i);
}

/* One check through porteiro_check_async on base (the event-loop path),
 * waited for: the callback must come exactly once. */
typedef struct async_answer {
    int calls;
    porteiro_status st;
    porteiro_decision d;
} async_answer;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    async_answer *a = arg;
    a->calls++;
    a->st = st;
    if (d != NULL)
        a->d = *d;
}

static porteiro_status check_on_loop(porteiro_t *p, struct event_base *base,
                                     const porteiro_request *req, porteiro_decision *d) {
    async_answer a = {0};
    porteiro_status st = porteiro_check_async(p, req, on_answer, &a);
    if (st != PORTEIRO_OK)
        return st;
    for (int i = 0; i < 10000 && a.calls == 0; i++)
        event_base_loop(base, EVLOOP_ONCE);
    TU_EQ(a.calls, 1, "callbacks of one async check");
    *d = a.d;
    return a.st;
}

/* Runs one scenario on p (key "k"); with c set, inspects Redis too; with
 * base set, each check goes through the event-loop path. */
static void run_scenario_on(porteiro_t *p, struct event_base *base, const scenario *s,
                            redisContext *c, const char *prefix, const char *backend) {
    for (size_t i = 0; i < SC_MAX_STEPS && s->steps[i].now_ms >= 0; i++) {
        const sc_step *w = &s->steps[i];
        porteiro_request req = {.limits = s->limits,
                                .nlimits = s->nlimits,
                                .key = "k",
                                .key_len = 1,
                                .cost = w->cost,
                                .now_ms = w->now_ms,
                                .max_wait_ms = 0};
        porteiro_decision d;
        bool writes = w->allowed && w->cost > 0;
        char *before = c != NULL && !writes ? snapshot(c, prefix) : NULL;

        porteiro_status st =
            base != NULL ? check_on_loop(p, base, &req, &d) : porteiro_check_request(p, &req, &d);
        TU_EQ(st, PORTEIRO_OK, "%s: %s, step %zu: %s", backend, s->name, i, porteiro_errmsg(p));
        expect_step(s, i, &d, backend);
        if (before != NULL) {
            char *after = snapshot(c, prefix);
            if (strcmp(before, after) != 0) {
                print_error("%s, step %zu wrote:\n%s---\n%s", s->name, i, before, after);
                fail();
            }
            free(after);
            free(before);
        } else if (c != NULL) {
            check_ttls(c, prefix, s, i, d.reset_ms);
        }
    }
}

static void run_scenario(porteiro_t *p, const scenario *s, redisContext *c, const char *prefix,
                         const char *backend) {
    run_scenario_on(p, NULL, s, c, prefix, backend);
}

static void table_on_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        porteiro_t *p = tu_open(NULL, "sc", 0);
        run_scenario(p, &scenarios[i], NULL, "sc", "memory");
        porteiro_free(p);
    }
}

static void table_on_redis(void **state) {
    (void)state;
    redisContext *c = tu_redis(&group_redis);
    porteiro_t *p = NULL;
    /* Every scenario over TCP, then again over the unix socket (not in the
     * _tls build: TLS is TCP only). */
    for (int unix_socket = 0; unix_socket < (test_group_ca != NULL ? 1 : 2); unix_socket++) {
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
            char prefix[32];
            snprintf(prefix, sizeof(prefix), "sc%zu-%d", i, unix_socket);
            p = tu_open(unix_socket ? group_redis.unix_url : group_redis.url, prefix, 0);
            run_scenario(p, &scenarios[i], c, prefix, unix_socket ? "redis (unix)" : "redis");
            porteiro_free(p);
        }
    }
    redisFree(c);
}

/* The whole table as an ACL user with the least rights porteiro needs, on
 * its own keys only: nothing is refused. */
static void table_as_least_privileged_user(void **state) {
    (void)state;
    assert_int_equal(
        test_redis_cmd(&group_redis, NULL, 0,
                       "ACL SETUSER lp on >pw resetkeys ~lp* resetchannels " TEST_LEAST_PRIVILEGE),
        0);
    redisContext *c = tu_redis(&group_redis);
    char url[400];
    if (test_group_ca != NULL) /* the _tls build */
        snprintf(url, sizeof(url), "rediss://lp:pw@127.0.0.1:%d", group_redis.tls_port);
    else
        snprintf(url, sizeof(url), "redis://lp:pw@127.0.0.1:%d", group_redis.port);
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "lp%zu", i);
        porteiro_t *p = tu_open(url, prefix, 0);
        run_scenario(p, &scenarios[i], c, prefix, "redis (least privilege)");
        porteiro_free(p);
    }
    redisFree(c);
}

/* The same table through porteiro_check_async on a libevent loop: the
 * event-loop transport (src/redis/async_conn.c), over TCP, a unix socket,
 * and TLS in the _tls build. */
static void table_on_redis_async(void **state) {
    (void)state;
    redisContext *c = tu_redis(&group_redis);
    struct event_base *base = porteiro_event_base_new();
    assert_non_null(base);
    for (int unix_socket = 0; unix_socket < (test_group_ca != NULL ? 1 : 2); unix_socket++) {
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
            char prefix[32];
            snprintf(prefix, sizeof(prefix), "asc%zu-%d", i, unix_socket);
            porteiro_t *p =
                tu_open(unix_socket ? group_redis.unix_url : group_redis.url, prefix, 0);
            assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
            run_scenario_on(p, base, &scenarios[i], c, prefix,
                            unix_socket ? "redis async (unix)" : "redis async");
            porteiro_free(p);
        }
    }
    event_base_free(base);
    redisFree(c);
}

/* The table itself: every scenario ends, and multi-limit rows are complete. */
static void table_is_well_formed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        const scenario *s = &scenarios[i];
        size_t n = 0;
        while (n < SC_MAX_STEPS && s->steps[n].now_ms >= 0)
            n++;
        assert_true(n > 0 && n < SC_MAX_STEPS);
        assert_true(s->nlimits >= 1 && s->nlimits <= 4);
        for (size_t k = 0; k < n && s->nlimits > 1; k++)
            if (s->steps[k].allowed)
                TU_EQ(s->steps[k].denied_by, -1, "%s, step %zu", s->name, k);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_is_well_formed), cmocka_unit_test(table_on_memory),
        cmocka_unit_test(table_on_redis),       cmocka_unit_test(table_as_least_privileged_user),
        cmocka_unit_test(table_on_redis_async),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
