/* conns.c — the connection bookkeeping both servers share (conns.h). */
#include "conns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "listen.h"
#include "ops/log.h"

int64_t pd_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg) {
    pd_conns *set = arg;
    (void)l;
    (void)salen;

    if (set->cap_at_accept && set->open >= set->max) {
        if (set->ops->refused != NULL)
            set->ops->refused(set->owner);
        close(fd);
        return;
    }
    char peer[INET6_ADDRSTRLEN] = "";
    if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, peer, sizeof(peer));
    else
        inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, peer, sizeof(peer));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    set->ops->accepted(set->owner, fd, peer);
}

static const char *accept_error_text(int err) {
    switch (err) {
        case EMFILE: return "too many open files (the process's limit: ulimit -n, LimitNOFILE=)";
        case ENFILE: return "too many open files in the system";
        case ENOBUFS:
        case ENOMEM: return "out of memory";
        default: return "an error";
    }
}

/* accept() failed for good (libevent retries EAGAIN, EINTR, ECONNABORTED
 * itself): the socket stays readable, so the loop would call accept again
 * at once, forever. As nginx does on EMFILE/ENFILE, stop accepting for
 * PD_ACCEPT_PAUSE_MS, then try again (connections wait in the backlog);
 * logged once until an accept works. */
static void on_accept_error(struct evconnlistener *l, void *arg) {
    pd_conns *set = arg;
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval pause = {0, PD_ACCEPT_PAUSE_MS * 1000};
    evconnlistener_disable(l);
    if (set->resume == NULL || event_add(set->resume, &pause) != 0)
        evconnlistener_enable(l); /* no timer: spinning beats never accepting again */
    set->accept_failed_ms = pd_mono_ms();
    set->accept_failures++;
    if (set->accept_failing_since_ms == 0) {
        set->accept_failing_since_ms = set->accept_failed_ms;
        pd_log(PD_LOG_ERROR,
               "port %d: accept failed: %s (errno %d); not accepting for %d ms "
               "at a time until it works again",
               set->port, accept_error_text(err), err, PD_ACCEPT_PAUSE_MS);
    }
}

/* The end of a run of accept failures: a second without one. */
static void accept_failures_over(pd_conns *set) {
    if (set->accept_failing_since_ms == 0 || set->now_ms - set->accept_failed_ms < 1000)
        return;
    pd_log(PD_LOG_INFO, "port %d: accepting connections again (%llu accept failures over %lld ms)",
           set->port, (unsigned long long)set->accept_failures,
           (long long)(set->accept_failed_ms - set->accept_failing_since_ms));
    set->accept_failing_since_ms = 0;
    set->accept_failures = 0;
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg) {
    pd_conns *set = arg;
    (void)fd;
    (void)what;
    if (set->listener != NULL) /* not stopped meanwhile */
        evconnlistener_enable(set->listener);
}

/* Every second: the clock, the end of accept failures, the owner's tick,
 * then connections past their deadline, or without progress for longer
 * than they may go, closed. */
static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    pd_conns *set = arg;
    (void)fd;
    (void)what;
    set->now_ms = pd_mono_ms();
    set->now_s = set->now_ms / 1000;
    accept_failures_over(set);
    if (set->ops->tick != NULL)
        set->ops->tick(set->owner);
    pd_conn *next;
    for (pd_conn *c = set->head; c != NULL; c = next) {
        next = c->next; /* closing c unlinks only c */
        if (set->ops->expired != NULL && !c->lingering && set->ops->expired(c, set->now_ms)) {
            set->ops->close(c);
            continue;
        }
        int64_t limit = set->ops->idle_limit(c);
        if (limit < 0)
            continue;
        int64_t idle = set->now_s - c->last_s;
        if (idle > limit || (c->lingering && idle >= PD_LINGER_S))
            set->ops->close(c);
    }
}

int pd_conns_init(pd_conns *set, struct event_base *base, const pd_conns_ops *ops, void *owner,
                  size_t max, bool cap_at_accept, const char *host, int port, bool reuseport,
                  char *err, size_t errlen) {
    set->base = base;
    set->ops = ops;
    set->owner = owner;
    set->max = max;
    set->cap_at_accept = cap_at_accept;
    set->now_ms = pd_mono_ms();
    set->now_s = set->now_ms / 1000;
    struct timeval second = {1, 0};
    set->sweep = event_new(base, -1, EV_PERSIST, on_sweep, set);
    if (set->sweep == NULL || event_add(set->sweep, &second) != 0) {
        snprintf(err, errlen, "cannot start a timer");
        return -1;
    }
    set->resume = evtimer_new(base, on_accept_resume, set);
    if (set->resume == NULL) {
        snprintf(err, errlen, "cannot start a timer");
        return -1;
    }
    set->listener = pd_listen(base, host, port, reuseport, on_accept, set, err, errlen);
    if (set->listener == NULL)
        return -1;
    evconnlistener_set_error_cb(set->listener, on_accept_error);
    set->port = pd_listener_port(set->listener);
    return 0;
}

void pd_conns_stop_accepting(pd_conns *set) {
    if (set->listener != NULL)
        evconnlistener_free(set->listener);
    set->listener = NULL;
}

void pd_conns_free(pd_conns *set) {
    pd_conns_stop_accepting(set);
    while (set->head != NULL)
        set->ops->close(set->head); /* unlinks it */
    if (set->sweep != NULL)
        event_free(set->sweep);
    set->sweep = NULL;
    if (set->resume != NULL)
        event_free(set->resume);
    set->resume = NULL;
}

int pd_conn_start(pd_conns *set, pd_conn *c, int fd, event_callback_fn on_readable,
                  event_callback_fn on_writable) {
    c->rev = event_new(set->base, fd, EV_READ | EV_PERSIST, on_readable, c);
    c->wev = event_new(set->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
    if (c->rev == NULL || c->wev == NULL || event_add(c->rev, NULL) != 0) {
        if (c->rev != NULL)
            event_free(c->rev);
        if (c->wev != NULL)
            event_free(c->wev);
        c->rev = c->wev = NULL;
        return -1;
    }
    c->set = set;
    c->fd = fd;
    c->reading = true;
    c->last_s = set->now_s;
    c->prev = NULL;
    c->next = set->head;
    if (set->head != NULL)
        set->head->prev = c;
    set->head = c;
    if (set->cap_at_accept) {
        c->counted = true;
        set->open++;
    }
    return 0;
}

bool pd_conn_admit(pd_conn *c) {
    if (c->counted)
        return true;
    if (c->set->open >= c->set->max)
        return false;
    c->counted = true;
    c->set->open++;
    return true;
}

bool pd_conn_reading(pd_conn *c, bool on) {
    if (c->reading == on)
        return true;
    c->reading = on;
    return (on ? event_add(c->rev, NULL) : event_del(c->rev)) == 0;
}

bool pd_conn_writing(pd_conn *c, bool on) {
    if (c->writing == on)
        return true;
    c->writing = on;
    return (on ? event_add(c->wev, NULL) : event_del(c->wev)) == 0;
}

void pd_conn_linger(pd_conn *c) {
    shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    pd_conn_touch(c);
}

void pd_conn_release(pd_conn *c) {
    pd_conns *set = c->set;
    if (set != NULL && c->fd >= 0) {
        if (c->prev != NULL)
            c->prev->next = c->next;
        else
            set->head = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
        if (c->counted)
            set->open--;
    }
    c->prev = c->next = NULL;
    c->counted = false;
    if (c->rev != NULL)
        event_free(c->rev);
    if (c->wev != NULL)
        event_free(c->wev);
    c->rev = c->wev = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}
