/* loop_libevent.c — the libevent binding of loop.h (events for the socket,
 * evtimers for deadlines). */
#include "redis/loop.h"

#include <event2/event.h>
#include <stdlib.h>

struct pt_timer {
    struct event *ev;
    pt_timer_fn *fn;
    void *arg;
};

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

struct pt_io {
    struct event *rev, *wev;
    bool writing;
    pt_io_fn *fn;
    void *arg;
};

static void on_io(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    pt_io *io = arg;
    io->fn(io->arg, (what & EV_READ) != 0, (what & EV_WRITE) != 0);
}

pt_io *pt_io_new(struct event_base *base, int fd, pt_io_fn *fn, void *arg) {
    pt_io *io = calloc(1, sizeof(*io));
    if (io == NULL)
        return NULL;
    io->fn = fn;
    io->arg = arg;
    io->rev = event_new(base, fd, EV_READ | EV_PERSIST, on_io, io);
    io->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, on_io, io);
    if (io->rev == NULL || io->wev == NULL || event_add(io->rev, NULL) != 0) {
        pt_io_free(io);
        return NULL;
    }
    return io;
}

void pt_io_want_write(pt_io *io, bool on) {
    if (on == io->writing)
        return;
    io->writing = on;
    if (on)
        event_add(io->wev, NULL);
    else
        event_del(io->wev);
}

void pt_io_free(pt_io *io) {
    if (io == NULL)
        return;
    if (io->rev != NULL)
        event_free(io->rev);
    if (io->wev != NULL)
        event_free(io->wev);
    free(io);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    pt_timer *t = arg;
    t->fn(t->arg);
}

pt_timer *pt_timer_new(struct event_base *base, pt_timer_fn *fn, void *arg) {
    pt_timer *t = malloc(sizeof(*t));
    if (t == NULL)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->ev = evtimer_new(base, on_timer, t);
    if (t->ev == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

void pt_timer_start(pt_timer *t, int64_t ms) {
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(t->ev, &tv);
}

void pt_timer_start_us(pt_timer *t, int64_t us) {
    if (us < 0)
        us = 0;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};
    evtimer_add(t->ev, &tv);
}

void pt_timer_stop(pt_timer *t) {
    if (t != NULL) /* a timer whose creation failed */
        evtimer_del(t->ev);
}

/* event_active queues the callback behind those already active: it runs
 * in this pass of the loop, after them. */
void pt_timer_fire_soon(pt_timer *t) { event_active(t->ev, EV_TIMEOUT, 1); }

void pt_timer_free(pt_timer *t) {
    if (t == NULL)
        return;
    event_free(t->ev);
    free(t);
}
