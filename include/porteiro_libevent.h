/*
 * porteiro_libevent.h — the libevent adapter of libporteiro's event-loop
 * interface (porteiro_loop_ops, include/porteiro.h): the async checks of a
 * handle run on a libevent event_base.
 *
 * Header-only, as hiredis's adapters are: libporteiro itself does not link
 * libevent; a program that includes this header does (pkg-config
 * porteiro-libevent: porteiro and libevent). Everything here is static
 * inline, compiled into the program; nothing here is a symbol of the
 * library, so it is not part of its ABI (the porteiro_loop_ops table it
 * fills is).
 *
 * Any event loop works the same way through porteiro_attach_loop: this file
 * is the example of one (docs/event_loop.md).
 */
#ifndef PORTEIRO_LIBEVENT_H
#define PORTEIRO_LIBEVENT_H

#include <event2/event.h>
#include <stdlib.h>
#include <sys/time.h>

#include "porteiro.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct porteiro_libevent_io {
    struct event *rev, *wev;
    porteiro_loop_io_fn *fn;
    void *arg;
} porteiro_libevent_io;

static inline void porteiro_libevent_on_io(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    porteiro_libevent_io *io = (porteiro_libevent_io *)arg;
    io->fn(io->arg, (what & EV_READ) != 0, (what & EV_WRITE) != 0);
}

static inline void porteiro_libevent_io_free(void *ctx, void *h) {
    (void)ctx;
    porteiro_libevent_io *io = (porteiro_libevent_io *)h;
    if (io->rev != NULL)
        event_free(io->rev);
    if (io->wev != NULL)
        event_free(io->wev);
    free(io);
}

static inline void *porteiro_libevent_io_new(void *ctx, int fd, porteiro_loop_io_fn *fn,
                                             void *arg) {
    porteiro_libevent_io *io = (porteiro_libevent_io *)calloc(1, sizeof(*io));
    if (io == NULL)
        return NULL;
    io->fn = fn;
    io->arg = arg;
    struct event_base *base = (struct event_base *)ctx;
    io->rev = event_new(base, fd, EV_READ | EV_PERSIST, porteiro_libevent_on_io, io);
    io->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, porteiro_libevent_on_io, io);
    if (io->rev == NULL || io->wev == NULL || event_add(io->rev, NULL) != 0) {
        porteiro_libevent_io_free(ctx, io);
        return NULL;
    }
    return io;
}

static inline void porteiro_libevent_io_want_write(void *ctx, void *h, bool on) {
    (void)ctx;
    porteiro_libevent_io *io = (porteiro_libevent_io *)h;
    if (on)
        event_add(io->wev, NULL);
    else
        event_del(io->wev);
}

typedef struct porteiro_libevent_timer {
    struct event *ev;
    porteiro_loop_timer_fn *fn;
    void *arg;
} porteiro_libevent_timer;

static inline void porteiro_libevent_on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    porteiro_libevent_timer *t = (porteiro_libevent_timer *)arg;
    t->fn(t->arg);
}

static inline void *porteiro_libevent_timer_new(void *ctx, porteiro_loop_timer_fn *fn, void *arg) {
    porteiro_libevent_timer *t = (porteiro_libevent_timer *)malloc(sizeof(*t));
    if (t == NULL)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->ev = evtimer_new((struct event_base *)ctx, porteiro_libevent_on_timer, t);
    if (t->ev == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

static inline void porteiro_libevent_timer_start(void *ctx, void *h, int64_t us) {
    (void)ctx;
    porteiro_libevent_timer *t = (porteiro_libevent_timer *)h;
    struct timeval tv;
    tv.tv_sec = (time_t)(us / 1000000);
    tv.tv_usec = (int)(us % 1000000);
    evtimer_add(t->ev, &tv);
}

static inline void porteiro_libevent_timer_stop(void *ctx, void *h) {
    (void)ctx;
    evtimer_del(((porteiro_libevent_timer *)h)->ev);
}

/* event_active queues the callback behind those already active: it runs
 * in this pass of the loop, after them. */
static inline void porteiro_libevent_timer_fire_soon(void *ctx, void *h) {
    (void)ctx;
    event_active(((porteiro_libevent_timer *)h)->ev, EV_TIMEOUT, 1);
}

static inline void porteiro_libevent_timer_free(void *ctx, void *h) {
    (void)ctx;
    porteiro_libevent_timer *t = (porteiro_libevent_timer *)h;
    event_free(t->ev);
    free(t);
}

/* The table (ctx: the struct event_base). now_us NULL: libevent's timers
 * count on CLOCK_MONOTONIC too. One table per translation unit: attach a
 * handle from one place (porteiro_attach_loop compares the table's
 * address to tell a repeated attach from another loop). */
static inline const porteiro_loop_ops *porteiro_libevent_ops(void) {
    static const porteiro_loop_ops ops = {
        porteiro_libevent_io_new,
        porteiro_libevent_io_want_write,
        porteiro_libevent_io_free,
        porteiro_libevent_timer_new,
        porteiro_libevent_timer_start,
        porteiro_libevent_timer_fire_soon,
        porteiro_libevent_timer_stop,
        porteiro_libevent_timer_free,
        NULL,
    };
    return &ops;
}

/* Runs the handle's Redis traffic on a libevent loop (porteiro_attach_loop
 * with the table above). Must be called before the first async check, on
 * the loop's thread; the base must outlive the handle. The memory backend
 * needs no loop: its async checks complete before the call returns. */
static inline porteiro_status porteiro_attach_libevent(porteiro_t *p, struct event_base *base) {
    if (p == NULL || base == NULL)
        return PORTEIRO_ERR_INVALID;
    return porteiro_attach_loop(p, porteiro_libevent_ops(), base);
}

/* A libevent base set up the way porteiro's loop connections run best:
 * epoll changes batched per pass of the loop
 * (EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST), so that a connection turning its
 * write interest on and off for every command costs no system call. Any
 * base works with porteiro_attach_libevent; this one is what porteirod and
 * `porteiro bench` use. NULL on failure; free it with event_base_free. */
static inline struct event_base *porteiro_event_base_new(void) {
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

#ifdef __cplusplus
}
#endif
#endif /* PORTEIRO_LIBEVENT_H */
