/* loop_libevent.c — the libevent binding of loop.h (hiredis's own adapter for
 * the socket, evtimers for deadlines). */
#include "redis/loop.h"

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <stdlib.h>

struct pt_timer {
    struct event *ev;
    pt_timer_fn *fn;
    void *arg;
};

/* Without the changelist each toggle of an event is an epoll_ctl system
 * call: hiredis's async connection toggles its write interest for every
 * command (and evhttp did for every answer: once the largest single cost in
 * a profile of porteirod under wrk). */
struct event_base *pt_loop_base_new(void) {
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

int pt_loop_attach_redis(struct event_base *base, redisAsyncContext *ac) {
    return redisLibeventAttach(ac, base) == REDIS_OK ? 0 : -1;
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
