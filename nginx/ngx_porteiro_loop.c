/* ngx_porteiro_loop.c — porteiro_loop_ops for nginx, the whole adapter:
 * a socket is an ngx_connection_t from the worker's pool with level-
 * triggered read (always) and write (while wanted) events; a timer is an
 * ngx_event_t in the timer tree; fire-soon posts it to ngx_posted_events,
 * which nginx runs after the events of this pass, so the checks every
 * request of the pass asked for leave together. */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_porteiro_loop.h"

typedef struct {
    ngx_connection_t *c;
    porteiro_loop_io_fn *fn;
    void *arg;
} np_io;

typedef struct {
    ngx_event_t ev;
    porteiro_loop_timer_fn *fn;
    void *arg;
} np_timer;

static void on_read(ngx_event_t *ev) {
    ngx_connection_t *c = ev->data;
    np_io *io = c->data;
    io->fn(io->arg, 1, 0);
}

static void on_write(ngx_event_t *ev) {
    ngx_connection_t *c = ev->data;
    np_io *io = c->data;
    io->fn(io->arg, 0, 1);
}

static void *io_new(void *ctx, int fd, porteiro_loop_io_fn *fn, void *arg) {
    ngx_log_t *log = ctx;
    np_io *io = ngx_calloc(sizeof(*io), log);
    if (io == NULL)
        return NULL;
    /* A connection of the worker's pool: nginx's events carry one. */
    ngx_connection_t *c = ngx_get_connection(fd, log);
    if (c == NULL) {
        ngx_free(io);
        return NULL;
    }
    io->c = c;
    io->fn = fn;
    io->arg = arg;
    c->data = io;
    c->log = log;
    c->read->log = log;
    c->write->log = log;
    c->read->handler = on_read;
    c->write->handler = on_write;
    /* Level-triggered, as the contract says (NGX_CLEAR_EVENT would be
     * epoll's edge trigger). */
    if (ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT) != NGX_OK) {
        c->fd = (ngx_socket_t)-1; /* the fd stays porteiro's: not closed here */
        ngx_free_connection(c);
        ngx_free(io);
        return NULL;
    }
    return io;
}

static void io_want_write(void *ctx, void *h, bool on) {
    (void)ctx;
    np_io *io = h;
    ngx_event_t *wev = io->c->write;
    if (on && !wev->active)
        ngx_add_event(wev, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
    else if (!on && wev->active)
        ngx_del_event(wev, NGX_WRITE_EVENT, 0);
}

static void io_free(void *ctx, void *h) {
    (void)ctx;
    np_io *io = h;
    ngx_connection_t *c = io->c;
    /* Out of epoll now (porteiro closes the fd after this returns), and
     * no event of this pass may reach it: posted ones are dropped, and
     * ngx_free_connection's instance bit marks those epoll already
     * returned as stale. */
    if (c->write->active)
        ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
    if (c->read->active)
        ngx_del_event(c->read, NGX_READ_EVENT, 0);
    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }
    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }
    ngx_free_connection(c);
    c->fd = (ngx_socket_t)-1;
    ngx_free(io);
}

static void on_timer(ngx_event_t *ev) {
    np_timer *t = ev->data;
    t->fn(t->arg);
}

static void *timer_new(void *ctx, porteiro_loop_timer_fn *fn, void *arg) {
    ngx_log_t *log = ctx;
    np_timer *t = ngx_calloc(sizeof(*t), log);
    if (t == NULL)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->ev.handler = on_timer;
    t->ev.data = t;
    t->ev.log = log;
    /* Not cancelable: a worker shutting down (reload) waits for the
     * deadlines of the checks in flight, so their requests are answered. */
    t->ev.cancelable = 0;
    return t;
}

static void timer_stop(void *ctx, void *h) {
    (void)ctx;
    np_timer *t = h;
    if (t->ev.timer_set) {
        ngx_del_timer(&t->ev);
    }
    if (t->ev.posted) { /* nginx's macros are statements: braces */
        ngx_delete_posted_event(&t->ev);
    }
}

static void timer_start(void *ctx, void *h, int64_t us) {
    (void)ctx;
    np_timer *t = h;
    /* ngx_add_timer keeps an armed timer within 300 ms of the new time
     * (NGX_TIMER_LAZY_DELAY): a deadline moved earlier would fire late. */
    if (t->ev.timer_set) {
        ngx_del_timer(&t->ev);
    }
    ngx_add_timer(&t->ev, (ngx_msec_t)((us + 999) / 1000)); /* never early */
}

static void timer_fire_soon(void *ctx, void *h) {
    (void)ctx;
    np_timer *t = h;
    if (!t->ev.posted) {
        ngx_post_event(&t->ev, &ngx_posted_events);
    }
}

static void timer_free(void *ctx, void *h) {
    timer_stop(ctx, h);
    ngx_free(h);
}

/* now_us NULL: porteiro's own CLOCK_MONOTONIC; nginx's cached
 * ngx_current_msec may lag it, and a timer then firing early only looks
 * at its deadlines again. */
const porteiro_loop_ops ngx_porteiro_loop_ops = {
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
