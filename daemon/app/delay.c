/* delay.c — held requests: a list (for pd_delay_abandon and the flush)
 * and one libevent timer each (delay.h). */
#include "delay.h"

#include <event2/event.h>
#include <stdlib.h>
#include <time.h>

typedef struct held {
    struct held *prev, *next;
    pd_delays *ds;
    struct event *ev;
    void *job;
    const void *conn;
    int64_t since_us;
    bool abandoned;
} held;

struct pd_delays {
    struct event_base *base;
    pd_release_fn *release;
    held *list;
    size_t count;
};

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

pd_delays *pd_delays_new(struct event_base *base, pd_release_fn *release) {
    pd_delays *ds = calloc(1, sizeof(*ds));
    if (ds != NULL) {
        ds->base = base;
        ds->release = release;
    }
    return ds;
}

static void unlink_held(pd_delays *ds, held *h) {
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        ds->list = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    ds->count--;
}

/* Unlinks h, frees it, then hands its job back. */
static void release(held *h) {
    pd_delays *ds = h->ds;
    unlink_held(ds, h);
    void *job = h->job;
    bool abandoned = h->abandoned;
    int64_t held_us = mono_us() - h->since_us;
    event_free(h->ev);
    free(h);
    ds->release(job, abandoned, held_us);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    release(arg);
}

int pd_delay_hold(pd_delays *ds, void *job, const void *conn, int64_t wait_ms) {
    held *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -1;
    h->ev = evtimer_new(ds->base, on_timer, h);
    struct timeval tv = {(time_t)(wait_ms / 1000), (suseconds_t)((wait_ms % 1000) * 1000)};
    if (h->ev == NULL || evtimer_add(h->ev, &tv) != 0) {
        if (h->ev != NULL)
            event_free(h->ev);
        free(h);
        return -1;
    }
    h->ds = ds;
    h->job = job;
    h->conn = conn;
    h->since_us = mono_us();
    h->next = ds->list;
    if (ds->list != NULL)
        ds->list->prev = h;
    ds->list = h;
    ds->count++;
    return 0;
}

void *pd_delay_abandon(pd_delays *ds, const void *conn) {
    for (held *h = ds->list; h != NULL; h = h->next) {
        if (h->conn != conn || h->abandoned)
            continue;
        h->abandoned = true;
        /* Not now: the caller (the server closing the connection) must not
         * see its answer come in on its own stack. */
        evtimer_del(h->ev);
        event_active(h->ev, EV_TIMEOUT, 1);
        return h->job;
    }
    return NULL;
}

void pd_delay_flush(pd_delays *ds) {
    while (ds->list != NULL) {
        ds->list->abandoned = true;
        release(ds->list);
    }
}

void pd_delays_free(pd_delays *ds) {
    if (ds == NULL)
        return;
    pd_delay_flush(ds);
    free(ds);
}

size_t pd_delay_count(const pd_delays *ds) {
    return ds != NULL ? ds->count : 0;
}
