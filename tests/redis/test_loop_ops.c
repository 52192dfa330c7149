/* test_loop_ops.c — porteiro_attach_loop with a second, hand-written event
 * loop (a small poll(2) loop below, no libevent): checks decided by a real
 * redis-server, exact counts, the checks of one pass sent together, the
 * budget's timer when Redis freezes, every io and timer given back at
 * porteiro_free, and the contract's refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "porteiro.h"
#include "redis_server.h"

/* ---- the loop: sockets by poll(2), timers by a scan, a "soon" flag ---- */

#define MAX_HANDLES 64

typedef struct pio {
    int fd;
    porteiro_loop_io_fn *fn;
    void *arg;
    bool want_write;
} pio;

typedef struct ptimer {
    porteiro_loop_timer_fn *fn;
    void *arg;
    int64_t at_us; /* 0: not armed */
    bool soon;
} ptimer;

typedef struct ploop {
    pio *ios[MAX_HANDLES];
    ptimer *timers[MAX_HANDLES];
    int ios_live, timers_live;
    int calls; /* every call porteiro made into the loop */
    int soon_calls;
} ploop;

static int64_t now_us(void *ctx) {
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int slot_free(void **slots) {
    for (int i = 0; i < MAX_HANDLES; i++)
        if (slots[i] == NULL)
            return i;
    return -1;
}

static void *io_new(void *ctx, int fd, porteiro_loop_io_fn *fn, void *arg) {
    ploop *l = ctx;
    l->calls++;
    int i = slot_free((void **)l->ios);
    pio *io = i >= 0 ? calloc(1, sizeof(*io)) : NULL;
    if (io == NULL)
        return NULL;
    *io = (pio){fd, fn, arg, false};
    l->ios[i] = io;
    l->ios_live++;
    return io;
}

static void io_want_write(void *ctx, void *h, bool on) {
    ((ploop *)ctx)->calls++;
    ((pio *)h)->want_write = on;
}

static void io_free(void *ctx, void *h) {
    ploop *l = ctx;
    l->calls++;
    for (int i = 0; i < MAX_HANDLES; i++)
        if (l->ios[i] == h) {
            l->ios[i] = NULL;
            l->ios_live--;
            free(h);
            return;
        }
    fail_msg("io_free of an io the loop does not have");
}

static void *timer_new(void *ctx, porteiro_loop_timer_fn *fn, void *arg) {
    ploop *l = ctx;
    l->calls++;
    int i = slot_free((void **)l->timers);
    ptimer *t = i >= 0 ? calloc(1, sizeof(*t)) : NULL;
    if (t == NULL)
        return NULL;
    *t = (ptimer){fn, arg, 0, false};
    l->timers[i] = t;
    l->timers_live++;
    return t;
}

static void timer_start(void *ctx, void *h, int64_t us) {
    ((ploop *)ctx)->calls++;
    assert_true(us >= 0);
    ((ptimer *)h)->at_us = now_us(ctx) + us;
}

static void timer_fire_soon(void *ctx, void *h) {
    ((ploop *)ctx)->calls++;
    ((ploop *)ctx)->soon_calls++;
    ((ptimer *)h)->soon = true;
}

static void timer_stop(void *ctx, void *h) {
    ((ploop *)ctx)->calls++;
    ((ptimer *)h)->at_us = 0;
    ((ptimer *)h)->soon = false;
}

static void timer_free(void *ctx, void *h) {
    ploop *l = ctx;
    l->calls++;
    for (int i = 0; i < MAX_HANDLES; i++)
        if (l->timers[i] == h) {
            l->timers[i] = NULL;
            l->timers_live--;
            free(h);
            return;
        }
    fail_msg("timer_free of a timer the loop does not have");
}

static const porteiro_loop_ops poll_ops = {
    .io_new = io_new,
    .io_want_write = io_want_write,
    .io_free = io_free,
    .timer_new = timer_new,
    .timer_start = timer_start,
    .timer_fire_soon = timer_fire_soon,
    .timer_stop = timer_stop,
    .timer_free = timer_free,
    .now_us = now_us,
};

/* A handle still in its slot is still live: a callback may free others
 * (or itself), so each is looked up again before it runs. */
static bool io_live(ploop *l, int i, const pio *io) {
    return l->ios[i] == io;
}

/* One pass: sockets ready now (or within the nearest timer), then timers
 * due, then those told to fire soon (and those they tell, in this pass). */
static void loop_pass(ploop *l, int max_wait_ms) {
    struct pollfd pf[MAX_HANDLES];
    pio *who[MAX_HANDLES];
    int slot[MAX_HANDLES], n = 0;
    int64_t now = now_us(l), wait_us = (int64_t)max_wait_ms * 1000;
    for (int i = 0; i < MAX_HANDLES; i++) {
        ptimer *t = l->timers[i];
        if (t != NULL && t->soon)
            wait_us = 0;
        if (t != NULL && t->at_us != 0 && t->at_us - now < wait_us)
            wait_us = t->at_us - now > 0 ? t->at_us - now : 0;
    }
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (l->ios[i] == NULL)
            continue;
        pf[n] = (struct pollfd){l->ios[i]->fd, POLLIN | (l->ios[i]->want_write ? POLLOUT : 0), 0};
        who[n] = l->ios[i];
        slot[n++] = i;
    }
    poll(pf, (nfds_t)n, (int)((wait_us + 999) / 1000));
    for (int k = 0; k < n; k++) {
        short re = pf[k].revents;
        if (re == 0 || !io_live(l, slot[k], who[k]))
            continue;
        bool rd = (re & (POLLIN | POLLHUP | POLLERR)) != 0;
        bool wr = (re & POLLOUT) != 0 && who[k]->want_write;
        if (rd || wr)
            who[k]->fn(who[k]->arg, rd, wr);
    }
    now = now_us(l);
    for (int i = 0; i < MAX_HANDLES; i++) {
        ptimer *t = l->timers[i];
        if (t != NULL && t->at_us != 0 && t->at_us <= now) {
            t->at_us = 0;
            t->fn(t->arg);
        }
    }
    for (bool again = true; again;) {
        again = false;
        for (int i = 0; i < MAX_HANDLES; i++) {
            ptimer *t = l->timers[i];
            if (t != NULL && t->soon) {
                t->soon = false;
                again = true;
                t->fn(t->arg);
            }
        }
    }
}

/* ---- checks ---- */

typedef struct tally {
    int calls, allowed, denied, fallback, errors;
} tally;

static void on_decision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    tally *t = arg;
    t->calls++;
    if (st != PORTEIRO_OK) {
        assert_null(d);
        t->errors++;
        return;
    }
    t->allowed += d->allowed;
    t->denied += !d->allowed;
    t->fallback += d->fallback != PORTEIRO_FALLBACK_NONE;
}

static void run_until(ploop *l, const tally *t, int want, int max_ms) {
    int64_t end = test_mono_ms() + max_ms;
    while (t->calls < want && test_mono_ms() < end)
        loop_pass(l, 20);
}

static const porteiro_limit window = {PORTEIRO_FIXED_WINDOW, 50, 3600000, 0};

static porteiro_t *new_limiter(const char *url, int budget_ms) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_OPEN;
    o.command_timeout_ms = budget_ms;
    o.connect_timeout_ms = 2000;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static void burst(porteiro_t *p, ploop *l, tally *t, const char *key, int n) {
    porteiro_request r = {.limits = &window,
                          .nlimits = 1,
                          .key = key,
                          .key_len = strlen(key),
                          .cost = 1,
                          .now_ms = PORTEIRO_NOW,
                          .max_wait_ms = 0};
    int want = t->calls + n;
    for (int i = 0; i < n; i++)
        assert_int_equal(porteiro_check_async(p, &r, on_decision, t), PORTEIRO_OK);
    run_until(l, t, want, 5000);
    assert_int_equal(t->calls, want);
}

/* 200 checks of one key on the poll loop: exactly the limit passes, the
 * checks of the pass left as a few batches, not 200 calls. */
static void exact_counts_on_a_poll_loop(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ploop l = {0};
    porteiro_t *p = new_limiter(r.url, 2000);
    assert_int_equal(porteiro_attach_loop(p, &poll_ops, &l), PORTEIRO_OK);
    tally t = {0};
    burst(p, &l, &t, "many", 200);
    assert_int_equal(t.allowed, 50);
    assert_int_equal(t.denied, 150);
    assert_int_equal(t.fallback, 0);

    /* 128 keys asked in one pass: they leave together, as 2 batches of 64
     * (one key twice would not share a batch: the 200 above did not). */
    long long before = test_redis_decision_calls(&r);
    porteiro_request reqs[128];
    char keys[128][16];
    tally spread = {0};
    for (int i = 0; i < 128; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        reqs[i] = (porteiro_request){.limits = &window,
                                     .nlimits = 1,
                                     .key = keys[i],
                                     .key_len = strlen(keys[i]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
        assert_int_equal(porteiro_check_async(p, &reqs[i], on_decision, &spread), PORTEIRO_OK);
    }
    run_until(&l, &spread, 128, 5000);
    assert_int_equal(spread.allowed, 128);
    assert_int_equal(test_redis_decision_calls(&r) - before, 2);
    assert_true(l.soon_calls >= 1);

    /* The blocking API sees the same count. */
    porteiro_decision d;
    porteiro_request req = {.limits = &window,
                            .nlimits = 1,
                            .key = "many",
                            .key_len = 4,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    assert_false(d.allowed);

    porteiro_free(p);
    assert_int_equal(l.ios_live, 0); /* every handle given back */
    assert_int_equal(l.timers_live, 0);
    test_redis_stop(&r);
}

/* A frozen Redis answers nothing: the budget's timer on the poll loop ends
 * each check in a fallback within the budget; thawed, decisions again. */
static void frozen_redis_times_out_on_the_loops_timer(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ploop l = {0};
    porteiro_t *p = new_limiter(r.url, 100);
    assert_int_equal(porteiro_attach_loop(p, &poll_ops, &l), PORTEIRO_OK);
    tally t = {0};
    burst(p, &l, &t, "frozen", 5);
    assert_int_equal(t.fallback, 0);

    test_redis_freeze(&r);
    tally down = {0};
    int64_t t0 = test_mono_ms();
    burst(p, &l, &down, "frozen", 10);
    int64_t took = test_mono_ms() - t0;
    assert_int_equal(down.fallback, 10);
    assert_int_equal(down.allowed, 10); /* on_error open */
    assert_true(took >= 90 && took < 2000);
    test_redis_thaw(&r);

    /* Recovery: the breaker lets a probe through after its cooldown. */
    tally back = {0};
    int64_t end = test_mono_ms() + 10000;
    while (test_mono_ms() < end) {
        back = (tally){0};
        burst(p, &l, &back, "frozen-after", 1);
        if (back.fallback == 0)
            break;
        loop_pass(&l, 100);
    }
    assert_int_equal(back.fallback, 0);
    porteiro_free(p);
    assert_int_equal(l.ios_live, 0);
    assert_int_equal(l.timers_live, 0);
    test_redis_stop(&r);
}

/* What the contract refuses: an incomplete table, a second loop. The
 * memory backend takes any loop and never calls it. */
static void attach_refusals(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ploop l = {0}, other = {0};
    porteiro_t *p = new_limiter(r.url, 500);
    porteiro_loop_ops partial = poll_ops;
    partial.timer_fire_soon = NULL;
    assert_int_equal(porteiro_attach_loop(p, &partial, &l), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "NULL"));
    assert_int_equal(porteiro_attach_loop(p, NULL, &l), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_attach_loop(NULL, &poll_ops, &l), PORTEIRO_ERR_INVALID);
    /* Not attached: an async check is refused, the callback never runs. */
    tally t = {0};
    porteiro_request req = {.limits = &window,
                            .nlimits = 1,
                            .key = "k",
                            .key_len = 1,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    assert_int_equal(porteiro_check_async(p, &req, on_decision, &t), PORTEIRO_ERR_INVALID);
    assert_int_equal(t.calls, 0);

    assert_int_equal(porteiro_attach_loop(p, &poll_ops, &l), PORTEIRO_OK);
    assert_int_equal(porteiro_attach_loop(p, &poll_ops, &l), PORTEIRO_OK); /* the same: no-op */
    assert_int_equal(porteiro_attach_loop(p, &poll_ops, &other), PORTEIRO_ERR_INVALID);
    assert_int_equal(other.calls, 0);
    porteiro_free(p);
    assert_int_equal(l.ios_live, 0);
    assert_int_equal(l.timers_live, 0);

    porteiro_t *m = new_limiter(NULL, 500);
    ploop ml = {0};
    assert_int_equal(porteiro_attach_loop(m, &poll_ops, &ml), PORTEIRO_OK);
    assert_int_equal(porteiro_check_async(m, &req, on_decision, &t), PORTEIRO_OK);
    assert_int_equal(t.calls, 1); /* before the call returned */
    porteiro_free(m);
    assert_int_equal(ml.calls, 0);
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_counts_on_a_poll_loop),
        cmocka_unit_test(frozen_redis_times_out_on_the_loops_timer),
        cmocka_unit_test(attach_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
