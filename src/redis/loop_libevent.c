/* loop_libevent.c — porteiro_loop_ops for libevent (events for the socket,
 * evtimers for deadlines, event_active for fire-soon); ctx is the
 * struct event_base. */
#include "redis/loop.h"

#include <event2/event.h>
#include <stdlib.h>

/* Without the changelist each toggle of an event is an epoll_ctl system
 * call: a connection that must wait to write toggles its write interest
 * (hiredis's async connection did for every command, and evhttp for every
 * answer: once the largest single cost in a profile of porteirod). */
struct event_base *pt_loop_base_new(void) {
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

typedef struct ev_io {
    struct event *rev, *wev;
    porteiro_loop_io_fn *fn;
    void *arg;
} ev_io;

static void on_io(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    ev_io *io = arg;
    io->fn(io->arg, (what & EV_READ) != 0, (what & EV_WRITE) != 0);
}

static void io_free(void *ctx, void *h) {
    (void)ctx;
    ev_io *io = h;
    if (io->rev != NULL)
        event_free(io->rev);
    if (io->wev != NULL)
        event_free(io->wev);
    free(io);
}

static void *io_new(void *ctx, int fd, porteiro_loop_io_fn *fn, void *arg) {
    ev_io *io = calloc(1, sizeof(*io));
    if (io == NULL)
        return NULL;
    io->fn = fn;
    io->arg = arg;
    io->rev = event_new(ctx, fd, EV_READ | EV_PERSIST, on_io, io);
    io->wev = event_new(ctx, fd, EV_WRITE | EV_PERSIST, on_io, io);
    if (io->rev == NULL || io->wev == NULL || event_add(io->rev, NULL) != 0) {
        io_free(ctx, io);
        return NULL;
    }
    return io;
}

static void io_want_write(void *ctx, void *h, bool on) {
    (void)ctx;
    ev_io *io = h;
    if (on)
        event_add(io->wev, NULL);
    else
        event_del(io->wev);
}

typedef struct ev_timer {
    struct event *ev;
    porteiro_loop_timer_fn *fn;
    void *arg;
} ev_timer;

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    ev_timer *t = arg;
    t->fn(t->arg);
}

static void *timer_new(void *ctx, porteiro_loop_timer_fn *fn, void *arg) {
    ev_timer *t = malloc(sizeof(*t));
    if (t == NULL)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->ev = evtimer_new(ctx, on_timer, t);
    if (t->ev == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

static void timer_start(void *ctx, void *h, int64_t us) {
    (void)ctx;
    ev_timer *t = h;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};
    evtimer_add(t->ev, &tv);
}

static void timer_stop(void *ctx, void *h) {
    (void)ctx;
    ev_timer *t = h;
    evtimer_del(t->ev);
}

/* event_active queues the callback behind those already active: it runs
 * in this pass of the loop, after them. */
static void timer_fire_soon(void *ctx, void *h) {
    (void)ctx;
    ev_timer *t = h;
    event_active(t->ev, EV_TIMEOUT, 1);
}

static void timer_free(void *ctx, void *h) {
    (void)ctx;
    ev_timer *t = h;
    event_free(t->ev);
    free(t);
}

/* now_us NULL: libevent's timers count on CLOCK_MONOTONIC too. */
const porteiro_loop_ops pt_libevent_ops = {
    .io_new = io_new,
    .io_want_write = io_want_write,
    .io_free = io_free,
    .timer_new = timer_new,
    .timer_start = timer_start,
    .timer_fire_soon = timer_fire_soon,
    .timer_stop = timer_stop,
    .timer_free = timer_free,
    .now_us = NULL,
};
