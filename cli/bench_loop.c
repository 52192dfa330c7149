/* bench_loop.c — the event-loop engine: every handle on one libevent loop in
 * one thread, `pipeline` checks in flight on each (a new one leaves as soon
 * as one is answered), like redis-benchmark. One thread waiting on all
 * sockets at once costs far less CPU per check than a thread per socket,
 * and on a small machine that CPU is taken from Redis. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro_libevent.h"
#include "bench.h"
#include "progress.h"

struct loop;

/* One check in flight. */
typedef struct slot {
    struct conn *c;
    int64_t sent_us;
    int next_free; /* index of the next free slot, -1 at the end */
} slot;

typedef struct conn {
    porteiro_t *p;
    struct loop *l;
    int64_t left; /* checks still to send */
    uint64_t rng;
    slot *slots;   /* pipeline of them */
    int free_head; /* first free slot, -1 if none */
} conn;

typedef struct loop {
    struct event_base *base;
    const bench_plan *plan;
    bench_result *out;
    int64_t outstanding; /* checks not answered yet (sent or to send) */
    bool warmup;         /* answers are not counted */
} loop;

static void send_check(conn *c, int64_t cost);

/* A failure stops its connection: what it had left is dropped. */
static void stop_conn(conn *c) {
    c->l->outstanding -= c->left;
    c->left = 0;
}

static void finish_one(loop *l) {
    if (--l->outstanding == 0)
        event_base_loopbreak(l->base);
}

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *priv) {
    slot *s = priv;
    conn *c = s->c;
    loop *l = c->l;
    if (!l->warmup) {
        cli_latency_add(&l->out->latency, bench_now_us() - s->sent_us, 1);
        bench_count(l->out, p, st, d);
        bench_progress_add(l->plan->progress, 1);
    } else if (st != PORTEIRO_OK) {
        bench_count(l->out, p, st, d);
    }
    s->next_free = c->free_head; /* the slot is free again */
    c->free_head = (int)(s - c->slots);
    if (st != PORTEIRO_OK)
        stop_conn(c);
    else if (c->left > 0)
        send_check(c, 1);
    finish_one(l);
}

/* Sends one check on c (cost 0 during the warm-up). The answer may come
 * before porteiro_check_async returns (a fallback): nothing is touched after. */
static void send_check(conn *c, int64_t cost) {
    slot *s = &c->slots[c->free_head];
    const bench_plan *plan = c->l->plan;
    char key[PORTEIRO_MAX_LIMITS][32];
    size_t len = bench_key(key[0], &c->rng, plan->keys);
    porteiro_request req = {.limits = plan->limit,
                            .nlimits = 1,
                            .key = key[0],
                            .key_len = len,
                            .cost = cost,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    porteiro_item items[PORTEIRO_MAX_LIMITS];

    c->free_head = s->next_free;
    c->left--;
    s->sent_us = bench_now_us();
    porteiro_status st;
    if (plan->items > 0) { /* a multi-key check: each item its own random key */
        /* --items is bounded by PORTEIRO_MAX_LIMITS (options.c); the bound is
         * repeated here so the compiler sees key[] cannot overflow. */
        for (size_t i = 0; i < plan->items && i < PORTEIRO_MAX_LIMITS; i++) {
            size_t n = i == 0 ? len : bench_key(key[i], &c->rng, plan->keys);
            items[i] = (porteiro_item){*plan->limit, key[i], n, cost, false, NULL};
        }
        porteiro_multi_request m = {.tag = plan->tag,
                                    .tag_len = strlen(plan->tag),
                                    .items = items,
                                    .nitems = plan->items,
                                    .now_ms = PORTEIRO_NOW};
        st = porteiro_check_async(c->p, &(porteiro_request){.multi = &m}, on_answer, s);
    } else {
        st = porteiro_check_async(c->p, &req, on_answer, s);
    }
    if (st != PORTEIRO_OK) { /* the callback will never come */
        bench_count(c->l->out, c->p, st, NULL);
        s->next_free = c->free_head;
        c->free_head = (int)(s - c->slots);
        stop_conn(c);
        finish_one(c->l);
    }
}

static void on_progress(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    bench_progress_tick(arg);
}

/* Sends what each connection may have in flight and runs until answered;
 * the progress line, if any, is redrawn from a timer of the loop. */
static void run_round(loop *l, conn *cs, int64_t cost) {
    struct event *tick = NULL;
    if (!l->warmup && l->plan->progress != NULL) {
        struct timeval tv = {0, BENCH_PROGRESS_EVERY_US};
        tick = event_new(l->base, -1, EV_PERSIST, on_progress, l->plan->progress);
        if (tick != NULL)
            event_add(tick, &tv);
    }
    for (size_t i = 0; i < l->plan->connections; i++)
        for (int64_t k = 0; k < l->plan->pipeline && cs[i].left > 0; k++)
            send_check(&cs[i], cost);
    if (l->outstanding > 0)
        event_base_dispatch(l->base);
    if (tick != NULL)
        event_free(tick);
}

static conn *make_conns(loop *l, porteiro_t *const *handles) {
    size_t n = l->plan->connections, p = (size_t)l->plan->pipeline;
    conn *cs = calloc(n, sizeof(*cs));
    for (size_t i = 0; cs != NULL && i < n; i++) {
        cs[i] = (conn){.p = handles[i], .l = l, .rng = bench_seed(i), .free_head = 0};
        cs[i].slots = malloc(p * sizeof(slot));
        if (cs[i].slots == NULL)
            return cs; /* checked by the caller */
        for (size_t k = 0; k < p; k++)
            cs[i].slots[k] = (slot){&cs[i], 0, k + 1 < p ? (int)k + 1 : -1};
    }
    return cs;
}

static void free_conns(conn *cs, size_t n) {
    for (size_t i = 0; cs != NULL && i < n; i++)
        free(cs[i].slots);
    free(cs);
}

bool bench_loop(const bench_plan *plan, porteiro_t *const *handles, struct event_base *base,
                bench_result *out) {
    for (size_t i = 0; i < plan->connections; i++)
        if (porteiro_attach_libevent(handles[i], base) != PORTEIRO_OK)
            return false;
    loop l = {.base = base, .plan = plan, .out = out, .warmup = true};
    conn *cs = make_conns(&l, handles);
    bool ok = cs != NULL;
    for (size_t i = 0; ok && i < plan->connections; i++)
        ok = cs[i].slots != NULL;
    if (!ok) {
        out->error = PORTEIRO_ERR_NOMEM;
        snprintf(out->errmsg, sizeof(out->errmsg), "out of memory");
        free_conns(cs, plan->connections);
        return true;
    }
    /* Warm-up: one peek per connection connects it and loads the script. */
    for (size_t i = 0; i < plan->connections; i++)
        cs[i].left = 1;
    l.outstanding = (int64_t)plan->connections;
    run_round(&l, cs, 0);
    if (out->error == PORTEIRO_OK) {
        l.warmup = false;
        for (size_t i = 0; i < plan->connections; i++) {
            cs[i].left = bench_share(plan, i);
            l.outstanding += cs[i].left;
        }
        int64_t t0 = bench_now_us();
        run_round(&l, cs, 1);
        out->elapsed_us = bench_now_us() - t0;
    }
    free_conns(cs, plan->connections);
    return true;
}
