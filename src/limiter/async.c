/* async.c — the event-loop face of the library (porteiro_check_async).
 *
 * The transport is redis/async_conn.c, one connection per handle on the
 * caller's loop; what a check's outcome becomes (breaker, fallback, stats,
 * shadow mode) is decide.c's, the same path blocking checks take. Each
 * callback fires exactly once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/decide.h"
#include "redis/async_conn.h"
#include "redis/loop.h"

/* A cluster's async check, decided at once by the blocking router; its
 * callback is delivered from the loop (never inside porteiro_check_async:
 * a callback that asks again would recurse without bound). */
typedef struct pt_deferred {
    struct pt_deferred *next, *prev;
    porteiro_t *p;
    pt_timer *timer;
    porteiro_callback *cb;
    void *privdata;
    porteiro_status st;
    porteiro_decision d;
} pt_deferred;

static void deliver(pt_deferred *q) {
    porteiro_t *p = q->p;
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        p->deferred = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    q->cb(p, q->st, q->st == PORTEIRO_OK ? &q->d : NULL, q->privdata);
    pt_timer_free(q->timer);
    free(q);
}

static void on_deferred(void *arg) { deliver(arg); }

/* Decided now; answered at the end of the loop's pass. */
static porteiro_status answer_later(porteiro_t *p, porteiro_status st, const porteiro_decision *d,
                                    porteiro_callback *cb, void *privdata) {
    if (st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_UNSUPPORTED)
        return st;
    pt_deferred *q = calloc(1, sizeof(*q));
    if (q == NULL || (q->timer = pt_timer_new(p->cluster_base, on_deferred, q)) == NULL) {
        free(q);
        return PORTEIRO_ERR_NOMEM;
    }
    q->p = p;
    q->cb = cb;
    q->privdata = privdata;
    q->st = st;
    if (st == PORTEIRO_OK)
        q->d = *d;
    q->next = p->deferred;
    if (q->next != NULL)
        q->next->prev = q;
    p->deferred = q;
    pt_timer_fire_soon(q->timer);
    return PORTEIRO_OK;
}

/* A cluster needs porteiro_attach_libevent too (its loop delivers). */
static bool cluster_attached(porteiro_t *p) {
    if (p->cluster_base != NULL && !p->async_closing)
        return true;
    snprintf(p->errmsg, sizeof(p->errmsg), "porteiro_attach_libevent was not called");
    return false;
}

/* One check in flight: the call lives here until the connection reports. */
typedef struct pt_async_check {
    porteiro_t *p;
    porteiro_callback *cb;
    void *privdata;
    int64_t asked_us; /* when Redis was asked (monotonic), -1 if it was not */
    pt_call call;
} pt_async_check;

/* Answers the caller: the decision, or what on_error makes of a failure. */
static void answer(pt_async_check *q, porteiro_status st, const porteiro_decision *d) {
    porteiro_t *p = q->p;
    porteiro_decision out;
    pthread_mutex_lock(&p->mu);
    st = pt_path_answer(p, &q->call, st, d, &out, q->asked_us);
    pthread_mutex_unlock(&p->mu);
    q->cb(p, st, st == PORTEIRO_OK ? &out : NULL, q->privdata);
    free(q);
}

static void on_outcome(void *arg, const pt_outcome *o, const porteiro_decision *d) {
    pt_async_check *q = arg;
    porteiro_t *p = q->p;
    if (o->status != PORTEIRO_ERR_NOMEM) {
        pthread_mutex_lock(&p->mu);
        pt_path_round_trip(p, o->sent ? o->latency_us : -1, pt_status_is_redis_failure(o->status),
                           o->timeout, o->node_failed, o->why);
        pthread_mutex_unlock(&p->mu);
    }
    answer(q, o->status, d);
}

porteiro_status porteiro_attach_libevent(porteiro_t *p, struct event_base *base) {
    if (p == NULL || base == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL)
        return PORTEIRO_OK; /* the memory backend needs no loop */
    if (pt_router_is_cluster(p->redis)) {
        if (p->cluster_base != NULL && p->cluster_base != base)
            return PORTEIRO_ERR_INVALID;
        p->cluster_base = base;
        return PORTEIRO_OK;
    }
    if (p->aconn != NULL)
        return pt_aconn_base(p->aconn) == base ? PORTEIRO_OK : PORTEIRO_ERR_INVALID;
    p->aconn = pt_aconn_new(base, pt_router_target(p->redis), p->opts.connect_timeout_ms,
                            p->opts.command_timeout_ms, p->opts.batch_max);
    return p->aconn != NULL ? PORTEIRO_OK : PORTEIRO_ERR_NOMEM;
}

/* A request that cannot be decided: the callback is never called. */
static bool is_bad_request(porteiro_status st) {
    return st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_UNSUPPORTED;
}

/* The memory backend decides at once: the callback runs before return. */
static porteiro_status answer_now(porteiro_t *p, porteiro_status st, const porteiro_decision *d,
                                  porteiro_callback *cb, void *privdata) {
    if (is_bad_request(st))
        return st;
    cb(p, st, st == PORTEIRO_OK ? d : NULL, privdata);
    return PORTEIRO_OK;
}

static bool attached(porteiro_t *p) {
    if (p->aconn != NULL && !p->async_closing)
        return true;
    snprintf(p->errmsg, sizeof(p->errmsg), "porteiro_attach_libevent was not called");
    return false;
}

/* Validates req, then sends it, or answers at once (a denial the deny cache
 * holds, the breaker open). on_error and shadow are the policy's (on_error
 * -1: the handle's). */
static porteiro_status submit(porteiro_t *p, const porteiro_request *req, int on_error,
                              bool shadow, porteiro_callback *cb, void *privdata) {
    pt_async_check *q = malloc(sizeof(*q));
    if (q == NULL)
        return PORTEIRO_ERR_NOMEM;
    q->p = p;
    q->cb = cb;
    q->privdata = privdata;
    q->asked_us = -1;
    porteiro_decision cached;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_status st = pt_prepare(p, req, &q->call);
    q->call.on_error = on_error;
    q->call.shadow = shadow;
    bool hit = st == PORTEIRO_OK && pt_path_cached(p, &q->call, &cached);
    bool send = st == PORTEIRO_OK && !hit && pt_path_gate(p, 1);
    pthread_mutex_unlock(&p->mu);
    if (st != PORTEIRO_OK) {
        free(q);
        return st;
    }
    if (hit) {
        answer(q, PORTEIRO_OK, &cached);
    } else if (send) {
        q->asked_us = pt_clock_us();
        pt_aconn_check(p->aconn, &q->call, on_outcome, q);
    } else {
        answer(q, PORTEIRO_ERR_CIRCUIT_OPEN, NULL);
    }
    return PORTEIRO_OK;
}

porteiro_status porteiro_check_async(porteiro_t *p, const porteiro_request *req,
                                     porteiro_callback *cb, void *privdata) {
    porteiro_decision d;
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL)
        return answer_now(p, porteiro_check_request(p, req, &d), &d, cb, privdata);
    /* A cluster is not routed on the loop yet: its checks are decided now,
     * on this thread, by the blocking router (docs/cluster.md). */
    if (pt_router_is_cluster(p->redis))
        return cluster_attached(p) ? answer_later(p, porteiro_check_request(p, req, &d), &d, cb,
                                                  privdata)
                                   : PORTEIRO_ERR_INVALID;
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    return submit(p, req, -1, false, cb, privdata);
}

porteiro_status porteiro_check_policy_async(porteiro_t *p, const porteiro_policy *policy,
                                            const void *key, size_t key_len, int64_t cost,
                                            int64_t now_ms, porteiro_callback *cb,
                                            void *privdata) {
    porteiro_decision d;
    if (p == NULL || policy == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL) /* decided now, on this thread */
        return answer_now(p, porteiro_check_policy(p, policy, key, key_len, cost, now_ms, &d), &d,
                          cb, privdata);
    if (pt_router_is_cluster(p->redis))
        return cluster_attached(p)
                   ? answer_later(p, porteiro_check_policy(p, policy, key, key_len, cost, now_ms, &d),
                                  &d, cb, privdata)
                   : PORTEIRO_ERR_INVALID;
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    if (policy->has_on_error && (unsigned)policy->on_error > PORTEIRO_ON_ERROR_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "policy: unknown on_error mode");
        return PORTEIRO_ERR_INVALID;
    }
    porteiro_request req = {policy->limits, policy->nlimits, key, key_len, cost, now_ms};
    return submit(p, &req, policy->has_on_error ? (int)policy->on_error : -1, policy->shadow, cb,
                  privdata);
}

void pt_async_free(porteiro_t *p) {
    p->async_closing = true;
    while (p->deferred != NULL) /* undelivered answers get their callback now */
        deliver(p->deferred);
    if (p->aconn == NULL)
        return;
    /* Checks still in flight get their callback now (a fallback). */
    p->async_closing = true;
    pt_aconn_free(p->aconn);
    p->aconn = NULL;
}
