/* test_settle.c — settles (issue 38): a check admitted against an estimate
 * and settled with its real cost (porteiro_settle, include/porteiro.h).
 *
 * A table in the style of scenarios.h: every row a policy and a sequence
 * of checks and settles on one key with an injected clock, each number
 * worked out by hand (the arithmetic beside it), run on the memory backend
 * (src/core/settle.c), on a real redis-server (src/lua/settle.lua), through
 * the event loop, and, as test_settle_module, through the Redis module's
 * porteiro.settle. Then: bad usage values refused with nothing changed,
 * Redis failing between the check and the settle (on_error), and two
 * handles on one Redis admitting and settling at once within the stated
 * bound (docs/algorithms.md, "Settling"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <pthread.h>

#include "porteiro_libevent.h"
#include "test_util.h"

#define FW PORTEIRO_FIXED_WINDOW
#define TB PORTEIRO_TOKEN_BUCKET
#define GC PORTEIRO_GCRA
#define SW PORTEIRO_SLIDING_WINDOW

enum { C = 1, S = 2 }; /* a check of cost a; a settle: estimate a, used b, age */

/* One step: at now, the call -> allowed, remaining, reset, retry (checks),
 * debt and debt_added (settles) of the decision. */
typedef struct st_step {
    int64_t now;
    int op;
    int64_t a, b, age;
    int allowed;
    int64_t remaining, reset, retry, debt, added;
} st_step;
#define END                                                                                        \
    { .now = -1 }

typedef struct st_row {
    const char *name;
    size_t n;
    porteiro_limit limits[2];
    st_step steps[16];
} st_row;

/* 31e9 ms: a period under 366 days with L = B = 1 (L x P <= 2^50). A
 * charge of 10^9 units then passes 2^51 scaled units: it saturates at
 * floor((2^51 - 31e9) / 31e9) = 72637 units of debt. */
#define BIGP 31000000000LL
#define SAT_RESET 2251778000000000LL /* (1 + 72637) x 31e9, ms (L = 1) */

static const st_row rows[] = {
    /* L = 10 per 1000 ms, B = 10: tokens x P, refill 10 scaled per ms. */
    {"token_bucket: give back, charge, debt repaid by the refill",
     1,
     {{TB, 10, 1000, 10}},
     {{0, C, 4, 0, 0, 1, 6, 400, 0, 0, 0},
      {0, S, 4, 1, 0, 1, 9, 100, 0, 0, 0}, /* 3 back: used 1 */
      {0, C, 2, 0, 0, 1, 7, 300, 0, 0, 0},
      {0, S, 2, 20, 0, 1, 0, 2100, 0, 11, 11},   /* used 3 + 18 = 21: 11 past empty */
      {0, C, 1, 0, 0, 0, 0, 2100, 1200, 0, 0},   /* (1 + 11) x 100 ms */
      {1100, C, 1, 0, 0, 0, 0, 1000, 100, 0, 0}, /* 11 refilled: tokens 0 */
      {1200, C, 1, 0, 0, 1, 0, 1000, 0, 0, 0},
      {1200, S, 1, 0, 0, 1, 1, 900, 0, 0, 0},
      {5000, S, 3, 0, 3800, 1, 10, 0, 0, 0, 0}, /* refilled meanwhile: nothing back */
      END}},
    /* T = 1000 ticks of 0.1 ms, tau = 10 000 ticks: the same numbers. */
    {"gcra: give back, charge, debt repaid as the TAT passes",
     1,
     {{GC, 10, 1000, 10}},
     {{0, C, 4, 0, 0, 1, 6, 400, 0, 0, 0},
      {0, S, 4, 1, 0, 1, 9, 100, 0, 0, 0},
      {0, C, 2, 0, 0, 1, 7, 300, 0, 0, 0},
      {0, S, 2, 20, 0, 1, 0, 2100, 0, 11, 11}, /* TAT 2100 ms: 21 000 - tau ticks */
      {0, C, 1, 0, 0, 0, 0, 2100, 1200, 0, 0},
      {1100, C, 1, 0, 0, 0, 0, 1000, 100, 0, 0},
      {1200, C, 1, 0, 0, 1, 0, 1000, 0, 0, 0},
      {1200, S, 1, 0, 0, 1, 1, 900, 0, 0, 0},
      {5000, S, 3, 0, 3800, 1, 10, 0, 0, 0, 0}, /* the TAT is past: nothing back */
      END}},
    /* L = 10 per window of 1000 ms. */
    {"fixed_window: debt blocks its window; give-back only into its window",
     1,
     {{FW, 10, 1000, 0}},
     {{100, C, 4, 0, 0, 1, 6, 900, 0, 0, 0},
      {100, S, 4, 1, 0, 1, 9, 900, 0, 0, 0},
      {100, C, 2, 0, 0, 1, 7, 900, 0, 0, 0},
      {100, C, 5, 0, 0, 1, 2, 900, 0, 0, 0},     /* count 8 */
      {150, S, 2, 20, 50, 1, 0, 850, 0, 16, 16}, /* count 26 */
      {200, C, 1, 0, 0, 0, 0, 800, 800, 0, 0},   /* until the window ends */
      {300, S, 5, 0, 200, 1, 0, 700, 0, 11, 0},  /* checked at 100: 5 back, count 21 */
      {1000, C, 1, 0, 0, 1, 9, 1000, 0, 0, 0},   /* a new window: the debt ended */
      {1000, S, 2, 0, 950, 1, 9, 1000, 0, 0, 0}, /* checked at 50, window over: nothing */
      {1000, S, 1, 0, -1, 1, 10, 0, 0, 0, 0},    /* age unknown: from this window */
      END}},
    /* L = 10 per 1000 ms; estimate x P = prev x (P - e) + cur x P. */
    {"sliding_window: debt carries into the next window, weighted",
     1,
     {{SW, 10, 1000, 0}},
     {{100, C, 4, 0, 0, 1, 6, 1900, 0, 0, 0},
      {100, S, 4, 1, 0, 1, 9, 1900, 0, 0, 0},
      {100, C, 5, 0, 0, 1, 4, 1900, 0, 0, 0},    /* cur 6 */
      {200, S, 5, 17, 100, 1, 0, 1800, 0, 8, 8}, /* cur 18: 8 past L */
      /* 19 x 1000 > L x P; next window: 700 + (1000 - 9000 / 18) */
      {300, C, 1, 0, 0, 0, 0, 1700, 1200, 0, 0},
      {1500, C, 1, 0, 0, 1, 0, 1500, 0, 0, 0},    /* 18 x 500 + 1000 = L x P */
      {1500, S, 5, 0, 1400, 1, 2, 1500, 0, 0, 0}, /* checked at 100: prev 18 - 5 */
      {1500, S, 1, 0, -1, 1, 3, 500, 0, 0, 0},    /* from the current window: cur 0 */
      {2500, S, 1, 0, 2400, 1, 10, 0, 0, 0, 0},   /* two windows ago: nothing */
      END}},
    /* A policy: the charge goes into both limits; debt is the larger. */
    {"policy: token_bucket and fixed_window charged together",
     2,
     {{TB, 10, 1000, 10}, {FW, 100, 60000, 0}},
     {{0, C, 5, 0, 0, 1, 5, 60000, 0, 0, 0},
      {0, S, 5, 30, 0, 1, 0, 60000, 0, 20, 20}, /* bucket 20 past empty, window 30 of 100 */
      {0, C, 1, 0, 0, 0, 0, 60000, 2100, 0, 0},
      END}},
    /* Saturation: 10^9 units charged; 72637 of them kept (see BIGP). */
    {"token_bucket: a charge past 2^51 scaled units saturates",
     1,
     {{TB, 1, BIGP, 1}},
     {{0, C, 1, 0, 0, 1, 0, BIGP, 0, 0, 0},
      {0, S, 1, 1000000000, 0, 1, 0, SAT_RESET, 0, 72637, 72637},
      {0, C, 1, 0, 0, 0, 0, SAT_RESET, SAT_RESET, 0, 0},
      END}},
    {"gcra: a charge past 2^51 ticks saturates",
     1,
     {{GC, 1, BIGP, 1}},
     {{0, C, 1, 0, 0, 1, 0, BIGP, 0, 0, 0},
      {0, S, 1, 1000000000, 0, 1, 0, SAT_RESET, 0, 72637, 72637},
      {0, C, 1, 0, 0, 0, 0, SAT_RESET, SAT_RESET, 0, 0},
      END}},
};

typedef struct answer {
    int calls;
    porteiro_status st;
    porteiro_decision d;
} answer;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    answer *a = arg;
    a->calls++;
    a->st = st;
    if (d != NULL)
        a->d = *d;
}

static porteiro_status wait_answer(struct event_base *base, porteiro_status st, answer *a,
                                   porteiro_decision *d) {
    if (st != PORTEIRO_OK)
        return st;
    for (int i = 0; i < 10000 && a->calls == 0; i++)
        event_base_loop(base, EVLOOP_ONCE);
    TU_EQ(a->calls, 1, "callbacks of one async call");
    *d = a->d;
    return a->st;
}

/* One step on p (through the loop when base is set). */
static porteiro_status run_step(porteiro_t *p, struct event_base *base, const st_row *r,
                                const st_step *w, porteiro_decision *d) {
    porteiro_request req = {.limits = r->limits,
                            .nlimits = r->n,
                            .key = "k",
                            .key_len = 1,
                            .cost = w->a,
                            .now_ms = w->now,
                            .max_wait_ms = 0};
    porteiro_usage u = {.estimate = w->a, .used = w->b, .age_ms = w->age};
    answer a = {0};
    if (w->op == C)
        return base != NULL ? wait_answer(base, porteiro_check_async(p, &req, on_answer, &a), &a, d)
                            : porteiro_check_request(p, &req, d);
    return base != NULL
               ? wait_answer(base, porteiro_settle_async(p, &req, &u, on_answer, &a), &a, d)
               : porteiro_settle(p, &req, &u, d);
}

/* Redis expires keys in real time while the rows inject time: every key is
 * made persistent after each step (the memory backend expires by the
 * injected clock, with the same answers). */
static void persist_all(redisContext *c, const char *prefix) {
    char pattern[64];
    tu_keys keys;
    snprintf(pattern, sizeof(pattern), "%s:*", prefix);
    tu_scan(c, pattern, &keys);
    for (size_t i = 0; i < keys.n; i++)
        freeReplyObject(tu_cmd(c, "PERSIST %b", keys.names[i], keys.lens[i]));
    tu_keys_free(&keys);
}

static void run_row(porteiro_t *p, struct event_base *base, const st_row *r, redisContext *c,
                    const char *prefix, const char *backend) {
    for (size_t i = 0; r->steps[i].now >= 0; i++) {
        const st_step *w = &r->steps[i];
        porteiro_decision d;
        memset(&d, 0x5a, sizeof(d)); /* every field must be written */
        porteiro_status st = run_step(p, base, r, w, &d);
        TU_EQ(st, PORTEIRO_OK, "%s: %s, step %zu: %s", backend, r->name, i, porteiro_errmsg(p));
        TU_EQ(d.allowed, w->allowed, "%s: %s, step %zu", backend, r->name, i);
        TU_EQ(d.remaining, w->remaining, "%s: %s, step %zu", backend, r->name, i);
        TU_EQ(d.reset_ms, w->reset, "%s: %s, step %zu", backend, r->name, i);
        TU_EQ(d.retry_after_ms, w->retry, "%s: %s, step %zu", backend, r->name, i);
        TU_EQ(d.debt, w->debt, "%s: %s, step %zu", backend, r->name, i);
        TU_EQ(d.debt_added, w->added, "%s: %s, step %zu", backend, r->name, i);
        TU_EQ(d.fallback, PORTEIRO_FALLBACK_NONE, "%s: %s, step %zu", backend, r->name, i);
        if (c != NULL)
            persist_all(c, prefix);
    }
}

static void table_on_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        porteiro_t *p = tu_open(NULL, "st", 0);
        run_row(p, NULL, &rows[i], NULL, "st", "memory");
        porteiro_free(p);
    }
}

static void table_on_redis(void **state) {
    (void)state;
    redisContext *c = tu_redis(&group_redis);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "st%zu", i);
        porteiro_t *p = tu_open(group_redis.url, prefix, 0);
        run_row(p, NULL, &rows[i], c, prefix, "redis");
        porteiro_free(p);
    }
    /* Under test_settle_module every server has porteiro.so: the settles
     * were its command's, not the script's. */
    const char *args = getenv("PORTEIRO_TEST_REDIS_ARGS");
    if (args != NULL && strstr(args, "loadmodule") != NULL) {
        redisReply *r = tu_cmd(c, "INFO commandstats");
        if (strstr(r->str, "cmdstat_porteiro.settle:calls=") == NULL) {
            print_error("the module's porteiro.settle was never called\n");
            fail();
        }
        freeReplyObject(r);
    }
    redisFree(c);
}

static void table_on_redis_async(void **state) {
    (void)state;
    redisContext *c = tu_redis(&group_redis);
    struct event_base *base = porteiro_event_base_new();
    assert_non_null(base);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "ast%zu", i);
        porteiro_t *p = tu_open(group_redis.url, prefix, 0);
        assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
        run_row(p, base, &rows[i], c, prefix, "redis async");
        porteiro_free(p);
    }
    event_base_free(base);
    redisFree(c);
}

/* ---- Bad usage values: refused, nothing changed ------------------------ */

static void bad_values_change_nothing_on(porteiro_t *p, struct event_base *base) {
    porteiro_limit l = {TB, 10, 1000, 10};
    porteiro_request req = {.limits = &l,
                            .nlimits = 1,
                            .key = "bad",
                            .key_len = 3,
                            .cost = 4,
                            .now_ms = 0,
                            .max_wait_ms = 0};
    porteiro_decision d, before, after;
    assert_int_equal(porteiro_check_request(p, &req, &before), PORTEIRO_OK);
    const porteiro_usage bad[] = {
        {.estimate = 4, .used = -1, .age_ms = 0},                      /* negative usage */
        {.estimate = 4, .used = PORTEIRO_MAX_AMOUNT + 1, .age_ms = 0}, /* huge usage */
        {.estimate = 4, .used = INT64_MAX, .age_ms = 0},
        {.estimate = 4, .used = INT64_MIN, .age_ms = 0},
        {.estimate = -1, .used = 0, .age_ms = 0}, /* negative estimate */
        {.estimate = PORTEIRO_MAX_AMOUNT + 1, .used = 0, .age_ms = 0},
        {.estimate = 4, .used = 0, .age_ms = -2}, /* an age that is no age */
        {.estimate = 4, .used = 0, .age_ms = INT64_MAX},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        answer a = {0};
        porteiro_status st = base != NULL ? porteiro_settle_async(p, &req, &bad[i], on_answer, &a)
                                          : porteiro_settle(p, &req, &bad[i], &d);
        TU_EQ(st, PORTEIRO_ERR_INVALID, "bad usage %zu", i);
        TU_EQ(a.calls, 0, "bad usage %zu: no callback", i);
        assert_true(strstr(porteiro_errmsg(p), "settle") != NULL);
    }
    assert_int_equal(porteiro_settle(p, &req, NULL, &d), PORTEIRO_ERR_INVALID);
    porteiro_limit log = {PORTEIRO_SLIDING_LOG, 10, 1000, 0};
    porteiro_request lreq = {.limits = &log,
                             .nlimits = 1,
                             .key = "bad",
                             .key_len = 3,
                             .cost = 1,
                             .now_ms = 0,
                             .max_wait_ms = 0};
    porteiro_usage ok = {.estimate = 1, .used = 5, .age_ms = 0};
    assert_int_equal(porteiro_settle(p, &lreq, &ok, &d), PORTEIRO_ERR_UNSUPPORTED);
    porteiro_limit both[2] = {{TB, 10, 1000, 10}, {PORTEIRO_SLIDING_LOG, 10, 1000, 0}};
    porteiro_request breq = {.limits = both,
                             .nlimits = 2,
                             .key = "bad",
                             .key_len = 3,
                             .cost = 1,
                             .now_ms = 0,
                             .max_wait_ms = 0};
    assert_int_equal(porteiro_settle(p, &breq, &ok, &d), PORTEIRO_ERR_UNSUPPORTED);
    porteiro_limit cc = {PORTEIRO_CONCURRENCY, 10, 1000, 0};
    porteiro_request creq = {.limits = &cc,
                             .nlimits = 1,
                             .key = "bad",
                             .key_len = 3,
                             .cost = 1,
                             .now_ms = 0,
                             .max_wait_ms = 0};
    assert_int_equal(porteiro_settle(p, &creq, &ok, &d), PORTEIRO_ERR_UNSUPPORTED);
    porteiro_request empty = {.limits = &l,
                              .nlimits = 1,
                              .key = "",
                              .key_len = 0,
                              .cost = 1,
                              .now_ms = 0,
                              .max_wait_ms = 0};
    assert_int_equal(porteiro_settle(p, &empty, &ok, &d), PORTEIRO_ERR_KEY);
    /* The state is as the check left it. */
    req.cost = 0;
    assert_int_equal(porteiro_check_request(p, &req, &after), PORTEIRO_OK);
    TU_EQ(after.remaining, before.remaining, "remaining after the refused settles");
    TU_EQ(after.reset_ms, before.reset_ms, "reset after the refused settles");
}

static void bad_values_memory(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "bad", 0);
    bad_values_change_nothing_on(p, NULL);
    porteiro_free(p);
}

static void bad_values_redis(void **state) {
    (void)state;
    porteiro_t *p = tu_open(group_redis.url, "bad", 0);
    porteiro_stats s0, s1;
    porteiro_stats_get(p, &s0);
    bad_values_change_nothing_on(p, NULL);
    porteiro_stats_get(p, &s1);
    /* Two checks reached Redis, and nothing else. */
    TU_EQ(s1.checks - s0.checks, 2, "checks");
    TU_EQ(s1.settles - s0.settles, 0, "settles");
    porteiro_free(p);
    struct event_base *base = porteiro_event_base_new();
    p = tu_open(group_redis.url, "badasync", 0);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    bad_values_change_nothing_on(p, base);
    porteiro_free(p);
    event_base_free(base);
}

/* ---- Redis failing between the check and the settle -------------------- */

/* A server that keeps its data across a kill -9 (appendfsync always): the
 * check's units are there after it, and whatever on_error says, a settle
 * made while it was down never reached it. */
static void redis_down_between_check_and_settle(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, "--appendonly yes --appendfsync always"), 0);
    porteiro_limit l = {FW, 100, 86400000, 0}; /* a day: no window ends mid-test */
    porteiro_request req = {.limits = &l,
                            .nlimits = 1,
                            .key = "down",
                            .key_len = 4,
                            .cost = 30,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    porteiro_usage give = {.estimate = 30, .used = 5, .age_ms = 0},
                   take = {.estimate = 30, .used = 80, .age_ms = 0};
    porteiro_decision d;
    porteiro_t *ok = tu_open(r.url, "dn", 0);
    assert_int_equal(porteiro_check_request(ok, &req, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    int64_t left = d.remaining; /* 70 */

    const porteiro_on_error modes[] = {PORTEIRO_ON_ERROR_OPEN, PORTEIRO_ON_ERROR_CLOSED,
                                       PORTEIRO_ON_ERROR_LOCAL, PORTEIRO_ON_ERROR_ERROR};
    porteiro_t *h[4];
    for (int i = 0; i < 4; i++) {
        porteiro_options o;
        porteiro_options_init(&o);
        o.redis_url = r.url;
        o.prefix = "dn";
        o.on_error = modes[i];
        o.command_timeout_ms = 300;
        h[i] = porteiro_new(&o, NULL, NULL, 0);
        assert_non_null(h[i]);
    }
    test_redis_kill9(&r);
    for (int i = 0; i < 4; i++) {
        /* open and error give back, closed and local charge */
        porteiro_status st = porteiro_settle(h[i], &req, i == 1 || i == 2 ? &take : &give, &d);
        if (modes[i] == PORTEIRO_ON_ERROR_ERROR) {
            assert_true(st == PORTEIRO_ERR_CONNECT || st == PORTEIRO_ERR_TIMEOUT);
            continue;
        }
        TU_EQ(st, PORTEIRO_OK, "on_error %d: %s", (int)modes[i], porteiro_errmsg(h[i]));
        porteiro_fallback want = modes[i] == PORTEIRO_ON_ERROR_OPEN     ? PORTEIRO_FALLBACK_OPEN
                                 : modes[i] == PORTEIRO_ON_ERROR_CLOSED ? PORTEIRO_FALLBACK_CLOSED
                                                                        : PORTEIRO_FALLBACK_LOCAL;
        TU_EQ(d.fallback, want, "on_error %d", (int)modes[i]);
        if (modes[i] == PORTEIRO_ON_ERROR_LOCAL) {
            /* The local fallback's own state took the charge of 50: it had
             * nothing, so 50 of 100 are used there. */
            TU_EQ(d.remaining, 50, "local fallback");
        } else {
            TU_EQ(d.debt, 0, "on_error %d", (int)modes[i]);
        }
        porteiro_stats s;
        porteiro_stats_get(h[i], &s);
        TU_EQ(s.settles, 1, "on_error %d: counted as a settle", (int)modes[i]);
        TU_EQ(s.checks, 0, "on_error %d: not as a check", (int)modes[i]);
    }
    assert_int_equal(test_redis_restart(&r), 0);
    /* The estimate stands: nothing was given back or charged in Redis. */
    porteiro_t *after = tu_open(r.url, "dn", 0);
    req.cost = 0;
    assert_int_equal(porteiro_check_request(after, &req, &d), PORTEIRO_OK);
    TU_EQ(d.remaining, left, "the check's units after the restart");
    /* And a settle now applies: 25 back. */
    assert_int_equal(porteiro_settle(after, &req, &give, &d), PORTEIRO_OK);
    TU_EQ(d.fallback, PORTEIRO_FALLBACK_NONE, "after the restart");
    TU_EQ(d.remaining, left + 25, "given back after the restart");
    porteiro_free(after);
    for (int i = 0; i < 4; i++)
        porteiro_free(h[i]);
    porteiro_free(ok);
    test_redis_stop(&r);
}

/* ---- Two handles, one Redis, admits and settles at once ---------------- */

/* Each thread keeps up to INFLIGHT checks admitted and not yet settled (a
 * FIFO), with estimates 1..8 and real costs 0..16, on a frozen clock (no
 * refill, one window): every unit the limit lets in is then counted, and
 * the bound of docs/algorithms.md reads: the units really used by every
 * admitted check <= capacity + the unestimated part of the checks in flight
 * at the last admission, which is at most the INFLIGHT largest U - E of
 * each thread. And once all are settled, the state holds exactly the sum
 * of U (remaining and debt say it). */
#define INFLIGHT 3
#define ATTEMPTS 400
#define CAP 200

typedef struct worker {
    porteiro_t *p;
    const porteiro_limit *limit;
    int64_t now;
    unsigned seed;
    int64_t used_sum, admitted, denied, settles;
    int64_t top[INFLIGHT]; /* the largest U - E of this thread, descending */
    int failed;
} worker;

static void keep_top(worker *w, int64_t v) {
    for (int i = 0; i < INFLIGHT; i++) {
        if (v > w->top[i]) {
            int64_t t = w->top[i];
            w->top[i] = v;
            v = t;
        }
    }
}

static void *work(void *arg) {
    worker *w = arg;
    int64_t est[INFLIGHT], use[INFLIGHT];
    int head = 0, n = 0;
    porteiro_request req = {.limits = w->limit,
                            .nlimits = 1,
                            .key = "shared",
                            .key_len = 6,
                            .cost = 0,
                            .now_ms = w->now,
                            .max_wait_ms = 0};
    porteiro_decision d;
    for (int i = 0; i < ATTEMPTS + INFLIGHT && !w->failed; i++) {
        if (n == INFLIGHT || (i >= ATTEMPTS && n > 0)) { /* settle the oldest */
            porteiro_usage u = {.estimate = est[head], .used = use[head], .age_ms = 0};
            if (porteiro_settle(w->p, &req, &u, &d) != PORTEIRO_OK)
                w->failed = 1;
            w->settles++;
            head = (head + 1) % INFLIGHT;
            n--;
        }
        if (i >= ATTEMPTS)
            continue;
        req.cost = 1 + rand_r(&w->seed) % 8;
        int64_t used = rand_r(&w->seed) % 17;
        if (porteiro_check_request(w->p, &req, &d) != PORTEIRO_OK) {
            w->failed = 1;
            break;
        }
        if (!d.allowed) {
            w->denied++;
            continue;
        }
        w->admitted++;
        w->used_sum += used;
        keep_top(w, used - req.cost);
        int at = (head + n) % INFLIGHT;
        est[at] = req.cost;
        use[at] = used;
        n++;
    }
    while (n > 0 && !w->failed) {
        porteiro_usage u = {.estimate = est[head], .used = use[head], .age_ms = 0};
        if (porteiro_settle(w->p, &req, &u, &d) != PORTEIRO_OK)
            w->failed = 1;
        head = (head + 1) % INFLIGHT;
        n--;
    }
    return NULL;
}

static void within_bound_on(const char *url, const char *prefix) {
    const porteiro_limit limits[] = {{TB, CAP, 3600000, CAP},
                                     {GC, CAP, 3600000, CAP},
                                     {FW, CAP, 3600000, 0},
                                     {SW, CAP, 3600000, 0}};
    for (size_t a = 0; a < 4; a++) {
        char pre[64];
        snprintf(pre, sizeof(pre), "%s%zu", prefix, a);
        worker w[2];
        pthread_t t[2];
        porteiro_t *shared = url == NULL ? tu_open(NULL, pre, 0) : NULL;
        for (int i = 0; i < 2; i++) {
            w[i] = (worker){.p = shared != NULL ? shared : tu_open(url, pre, 0),
                            .limit = &limits[a],
                            .now = 3600000LL * 1000 + 1800000, /* mid-window */
                            .seed = 7 + 31 * (unsigned)i + 101 * (unsigned)a};
            assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
        }
        int64_t used = 0, bound = CAP, admitted = 0, denied = 0;
        for (int i = 0; i < 2; i++) {
            pthread_join(t[i], NULL);
            assert_false(w[i].failed);
            used += w[i].used_sum;
            admitted += w[i].admitted;
            denied += w[i].denied;
            for (int k = 0; k < INFLIGHT; k++)
                bound += w[i].top[k] > 0 ? w[i].top[k] : 0;
        }
        /* The state once all settled: exactly the units used. */
        porteiro_request req = {.limits = &limits[a],
                                .nlimits = 1,
                                .key = "shared",
                                .key_len = 6,
                                .cost = 0,
                                .now_ms = w[0].now,
                                .max_wait_ms = 0};
        porteiro_usage none = {.estimate = 0, .used = 0, .age_ms = 0};
        porteiro_decision d;
        assert_int_equal(porteiro_settle(w[0].p, &req, &none, &d), PORTEIRO_OK);
        int64_t held = d.debt > 0 ? CAP + d.debt : CAP - d.remaining;
        print_message("%s %s: %lld admitted, %lld denied, %lld units used, bound %lld, "
                      "debt %lld\n",
                      url ? "redis" : "memory", porteiro_algorithm_name(limits[a].algorithm),
                      (long long)admitted, (long long)denied, (long long)used, (long long)bound,
                      (long long)d.debt);
        TU_EQ(held, used, "%s: the state holds exactly the units used",
              porteiro_algorithm_name(limits[a].algorithm));
        if (used > bound) {
            print_error("%s: %lld units used by admitted checks, over the bound %lld\n",
                        porteiro_algorithm_name(limits[a].algorithm), (long long)used,
                        (long long)bound);
            fail();
        }
        /* The run meant something: the limit was reached and denied, and
         * without the charges the checks would have used far more. */
        assert_true(denied > ATTEMPTS / 2);
        assert_true(used >= CAP - 8);
        for (int i = 0; i < 2; i++)
            if (w[i].p != shared)
                porteiro_free(w[i].p);
        if (shared != NULL)
            porteiro_free(shared);
    }
}

static void concurrent_within_bound_memory(void **state) {
    (void)state;
    within_bound_on(NULL, "cm");
}

static void concurrent_within_bound_redis(void **state) {
    (void)state;
    within_bound_on(group_redis.url, "cr");
}

/* ---- Twins: random checks and settles, memory against Redis ----------- */

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* 300 random steps on one key: time moves 0..999 ms; half are checks of
 * 0..8, half settles of estimate 0..8 and used 0..40 (debts), their age
 * unknown or 0..2999 ms (window edges). Both backends answer exactly the
 * same, debts included. Redis's keys are made persistent after each step
 * (a starved run must not see real time expire them mid-walk); a state
 * past its TTL equals no state, so the memory backend's expiry by the
 * injected clock changes nothing. */
static void twin_walk(const porteiro_limit *limits, size_t n, const char *key, uint64_t seed) {
    porteiro_t *mem = tu_open(NULL, "tw", 0), *red = tu_open(group_redis.url, "tw", 0);
    redisContext *c = tu_redis(&group_redis);
    int64_t now = 1000000;
    for (int step = 0; step < 300; step++) {
        uint64_t r = xorshift(&seed);
        now += (int64_t)(r % 1000);
        porteiro_request req = {.limits = limits,
                                .nlimits = n,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = (int64_t)((r >> 10) % 9),
                                .now_ms = now,
                                .max_wait_ms = 0};
        porteiro_usage u = {.estimate = req.cost,
                            .used = (int64_t)((r >> 20) % 41),
                            .age_ms = (r >> 30) % 4 == 0 ? -1 : (int64_t)((r >> 32) % 3000)};
        bool settle = (r >> 50) % 2 == 0;
        porteiro_decision a, b;
        if (settle) {
            assert_int_equal(porteiro_settle(mem, &req, &u, &a), PORTEIRO_OK);
            assert_int_equal(porteiro_settle(red, &req, &u, &b), PORTEIRO_OK);
        } else {
            assert_int_equal(porteiro_check_request(mem, &req, &a), PORTEIRO_OK);
            assert_int_equal(porteiro_check_request(red, &req, &b), PORTEIRO_OK);
        }
        bool eq = a.allowed == b.allowed && a.remaining == b.remaining &&
                  a.reset_ms == b.reset_ms && a.retry_after_ms == b.retry_after_ms &&
                  a.debt == b.debt && a.debt_added == b.debt_added;
        for (size_t i = 0; eq && i < n; i++)
            eq = a.limits[i].remaining == b.limits[i].remaining &&
                 a.limits[i].reset_ms == b.limits[i].reset_ms &&
                 a.limits[i].allowed == b.limits[i].allowed;
        if (!eq)
            fail_msg("%s step %d (%s, now %lld, cost %lld, used %lld, age %lld): memory "
                     "%d/%lld/%lld/%lld debt %lld+%lld, redis %d/%lld/%lld/%lld debt %lld+%lld",
                     key, step, settle ? "settle" : "check", (long long)now, (long long)req.cost,
                     (long long)u.used, (long long)u.age_ms, a.allowed, (long long)a.remaining,
                     (long long)a.reset_ms, (long long)a.retry_after_ms, (long long)a.debt,
                     (long long)a.debt_added, b.allowed, (long long)b.remaining,
                     (long long)b.reset_ms, (long long)b.retry_after_ms, (long long)b.debt,
                     (long long)b.debt_added);
        persist_all(c, "tw");
    }
    redisFree(c);
    porteiro_free(mem);
    porteiro_free(red);
}

static void twins_memory_and_redis(void **state) {
    (void)state;
    const porteiro_limit one[4][1] = {
        {{FW, 20, 10000, 0}}, {{TB, 20, 10000, 30}}, {{GC, 20, 10000, 30}}, {{SW, 20, 10000, 0}}};
    const char *names[4] = {"fw", "tb", "gc", "sw"};
    for (int a = 0; a < 4; a++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            char key[16];
            snprintf(key, sizeof(key), "%s%d", names[a], (int)seed);
            twin_walk(one[a], 1, key, 0x9e3779b97f4a7c15ULL * seed + (uint64_t)a);
        }
    const porteiro_limit policy[3] = {{TB, 20, 10000, 30}, {SW, 50, 30000, 0}, {GC, 5, 1000, 8}};
    twin_walk(policy, 3, "policy", 42);
}

/* A multi-key settle (porteiro_settle of a request with .multi): each
 * item's cost is what it used, est[i] (NULL: all 0) what it was checked
 * with. */
static porteiro_status settle_items(porteiro_t *p, const porteiro_multi_request *m,
                                    const int64_t *est, int64_t age_ms, porteiro_decision *d) {
    porteiro_usage u = {
        .age_ms = age_ms, .estimates = est, .nestimates = est != NULL ? m->nitems : 0};
    return porteiro_settle(p, &(porteiro_request){.multi = m}, &u, d);
}

/* A multi-key check's items settled each on its own (per-item deltas in
 * one call), and a pure charge (no estimates: the check took nothing, as
 * Envoy's apply_on_stream_done). */
static void multi_on(porteiro_t *p) {
    int64_t now = 86400000LL * 100 + 1000;
    porteiro_item items[2] = {
        {.limit = {FW, 10, 86400000, 0}, .key = "a", .key_len = 1, .cost = 3},
        {.limit = {TB, 10, 3600000, 10}, .key = "b", .key_len = 1, .cost = 3}};
    porteiro_multi_request m = {
        .tag = "t", .tag_len = 1, .items = items, .nitems = 2, .now_ms = now};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    /* a used 8 of its 3, b 1 of its 3 */
    int64_t est[2] = {3, 3};
    items[0].cost = 8;
    items[1].cost = 1;
    assert_int_equal(settle_items(p, &m, est, 0, &d), PORTEIRO_OK);
    TU_EQ(d.limits[0].remaining, 2, "a after +5");
    TU_EQ(d.limits[1].remaining, 9, "b after -2");
    TU_EQ(d.debt, 0, "no debt yet");
    /* a pure charge: a 5 (count 13: 3 past L), b 20 (21 used: 11 past B) */
    items[0].cost = 5;
    items[1].cost = 20;
    assert_int_equal(settle_items(p, &m, NULL, -1, &d), PORTEIRO_OK);
    TU_EQ(d.limits[0].remaining, 0, "a in debt");
    TU_EQ(d.limits[1].remaining, 0, "b in debt");
    TU_EQ(d.debt, 11, "the largest debt");
    TU_EQ(d.debt_added, 11, "the most one item went into debt");
    /* the check that follows is denied by both */
    items[0].cost = items[1].cost = 1;
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    /* one item: a single check of its item's key, settled as such */
    porteiro_multi_request one = {
        .tag = "t", .tag_len = 1, .items = &items[0], .nitems = 1, .now_ms = now};
    items[0].cost = 0;
    int64_t three = 3;
    assert_int_equal(settle_items(p, &one, &three, 0, &d), PORTEIRO_OK);
    TU_EQ(d.debt, 0, "a: 3 back of 13");
    TU_EQ(d.remaining, 0, "a: count 10");
    /* bad values change nothing */
    int64_t bad = -1;
    assert_int_equal(settle_items(p, &one, &bad, 0, &d), PORTEIRO_ERR_INVALID);
    assert_int_equal(settle_items(p, &one, NULL, -2, &d), PORTEIRO_ERR_INVALID);
    items[0].cost = -1;
    assert_int_equal(settle_items(p, &one, NULL, 0, &d), PORTEIRO_ERR_INVALID);
}

static void multi_memory_and_redis(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "mm", 0);
    multi_on(p);
    porteiro_free(p);
    p = tu_open(group_redis.url, "mr", 0);
    multi_on(p);
    porteiro_free(p);
}

/* Two items of one multi-key check that name one state (the same key,
 * algorithm, period, L and B) are one counter: the check took the larger
 * of their costs (20) once, and the settle applies once, from the larger
 * estimate to the larger use (30): 30 held, not 20 + 20 + 10. */
static void aliased_items_on(porteiro_t *p) {
    porteiro_limit l = {TB, 100, 3600000, 100};
    porteiro_item it[2] = {{l, "al", 2, 10, false, NULL}, {l, "al", 2, 20, false, NULL}};
    porteiro_multi_request mr = {
        .tag = "t", .tag_len = 1, .items = it, .nitems = 2, .now_ms = 1000000};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &mr}, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    TU_EQ(d.limits[0].remaining, 80, "the check took 20 once");
    int64_t est[2] = {10, 20};
    it[0].cost = 5;
    it[1].cost = 30;
    assert_int_equal(settle_items(p, &mr, est, 0, &d), PORTEIRO_OK);
    TU_EQ(d.limits[0].remaining, 70, "settled once: 30 used");
    TU_EQ(d.limits[1].remaining, 70, "the same state");
    it[0].cost = 0;
    it[1].cost = 0;
    mr.nitems = 1;
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &mr}, &d), PORTEIRO_OK);
    TU_EQ(d.remaining, 70, "what the state holds");
}

static void aliased_items_settle_once(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "am", 0);
    aliased_items_on(p);
    porteiro_free(p);
    p = tu_open(group_redis.url, "ar", 0);
    aliased_items_on(p);
    porteiro_free(p);
}

/* A Redis Cluster: a settle is one script call on its key's master (every
 * key of a check shares the client key's hash tag), through the blocking
 * router and the event loop's. */
static void settle_on_a_cluster(void **state) {
    (void)state;
    test_cluster cl;
    assert_int_equal(test_cluster_start(&cl, 3), 0); /* the fewest redis-cli takes */
    porteiro_limit ls[2] = {{TB, 100, 3600000, 100}, {FW, 1000, 86400000, 0}};
    struct event_base *base = porteiro_event_base_new();
    for (int async = 0; async < 2; async++) {
        porteiro_t *p = tu_open(cl.url, async ? "cla" : "cl", 0);
        if (async)
            assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
        for (int k = 0; k < 8; k++) { /* keys on both masters */
            char key[16];
            snprintf(key, sizeof(key), "user:%d", k);
            porteiro_request req = {.limits = ls,
                                    .nlimits = 2,
                                    .key = key,
                                    .key_len = strlen(key),
                                    .cost = 10,
                                    .now_ms = PORTEIRO_NOW,
                                    .max_wait_ms = 0};
            porteiro_usage u = {.estimate = 10, .used = 130, .age_ms = 0};
            porteiro_decision d;
            answer a = {0};
            assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
            assert_true(d.allowed);
            porteiro_status st =
                async ? wait_answer(base, porteiro_settle_async(p, &req, &u, on_answer, &a), &a, &d)
                      : porteiro_settle(p, &req, &u, &d);
            TU_EQ(st, PORTEIRO_OK, "%s: %s", key, porteiro_errmsg(p));
            TU_EQ(d.fallback, PORTEIRO_FALLBACK_NONE, "%s", key);
            TU_EQ(d.debt, 30, "%s: 130 used of a bucket of 100", key);
            TU_EQ(d.debt_added, 30, "%s", key);
        }
        porteiro_free(p);
    }
    event_base_free(base);
    test_cluster_stop(&cl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_on_memory),
        cmocka_unit_test(table_on_redis),
        cmocka_unit_test(table_on_redis_async),
        cmocka_unit_test(bad_values_memory),
        cmocka_unit_test(bad_values_redis),
        cmocka_unit_test(redis_down_between_check_and_settle),
        cmocka_unit_test(concurrent_within_bound_memory),
        cmocka_unit_test(concurrent_within_bound_redis),
        cmocka_unit_test(settle_on_a_cluster),
        cmocka_unit_test(multi_memory_and_redis),
        cmocka_unit_test(aliased_items_settle_once),
        cmocka_unit_test(twins_memory_and_redis),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
