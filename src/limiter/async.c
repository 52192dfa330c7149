/* async.c — the event-loop face of the library (porteiro_check_async).
 *
 * The transport is redis/async_conn.c, one connection per handle on the
 * caller's loop, or on a Redis Cluster topology/acluster.c, one per master;
 * what a check's outcome becomes (breaker, fallback, stats, shadow mode) is
 * decide.c's, the same path blocking checks take. Each callback fires
 * exactly once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/decide.h"
#include "limiter/global.h"
#include "limiter/settle.h"
#include "limiter/top.h"
#include "limiter/quota.h"
#include "limiter/spread.h"
#include "redis/async_conn.h"
#include "redis/loop.h"
#include "topology/acluster.h"
#include "topology/slots.h"

/* One check in flight: the call lives here until the connection reports. */
typedef struct pt_async_check {
    porteiro_t *p;
    porteiro_decision_fn *cb;
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
        /* On a cluster the handle's breaker stays closed: the master that
         * had the check moves its own (as the blocking path does). */
        bool cluster = p->acluster != NULL;
        int64_t latency = o->sent ? o->latency_us : -1;
        bool failed = pt_status_is_redis_failure(o->status);
        if (o->again) { /* the breaker counted this stall or lost connection once */
            pt_path_trip_stats(p, latency, failed, o->timeout, o->why);
        } else {
            pt_path_round_trip(p, latency, failed, o->timeout, !cluster && o->node_failed, o->why);
            if (cluster)
                pt_path_nodes_round_trip(p, &o->node, &o->node_failed, 1);
        }
        pthread_mutex_unlock(&p->mu);
    }
    answer(q, o->status, d);
}

/* ---- a multi-key check over several cluster slots (spread.h) ---------- */

/* Its give-backs in flight: counted as each answers, freed with the last. */
typedef struct pt_async_giveback {
    porteiro_t *p;
    size_t pending;
    pt_call calls[PORTEIRO_MAX_LIMITS];
} pt_async_giveback;

static void giveback_done(pt_async_giveback *g) {
    if (--g->pending == 0)
        free(g);
}

static void on_giveback(void *arg, const pt_outcome *o, const porteiro_decision *d) {
    (void)d;
    pt_async_giveback *g = arg;
    porteiro_t *p = g->p;
    pthread_mutex_lock(&p->mu);
    if (o->status != PORTEIRO_ERR_NOMEM)
        pt_path_nodes_round_trip(p, &o->node, &o->node_failed, 1);
    pt_spread_count(p, o->status, o->why);
    pthread_mutex_unlock(&p->mu);
    giveback_done(g);
}

/* The check was not admitted: the units its slots took go back, one call
 * per slot, sent now (the caller's answer does not wait for them). */
static void spread_give_back(porteiro_t *p, const pt_spread *s, const pt_call *call) {
    pt_async_giveback *g = malloc(sizeof(*g));
    if (g == NULL) {
        pthread_mutex_lock(&p->mu);
        pt_spread_count(p, PORTEIRO_ERR_NOMEM, "out of memory");
        pthread_mutex_unlock(&p->mu);
        return;
    }
    g->p = p;
    size_t n = pt_spread_givebacks(s, call, g->calls);
    g->pending = n + 1; /* + 1 while sending: an answer may come at once */
    for (size_t k = 0; k < n; k++)
        pt_acluster_check(p->acluster, &g->calls[k], on_giveback, g);
    giveback_done(g);
}

/* The check and its sub-calls, one per slot, until every slot answered. */
typedef struct pt_async_spread {
    pt_async_check *q;
    pt_spread *s;
    size_t pending; /* sub-calls to answer, + 1 while sending */
    struct pt_spread_ref {
        struct pt_async_spread *as;
        size_t j;
    } refs[PORTEIRO_MAX_LIMITS];
} pt_async_spread;

/* Every slot answered: one decision, the give-backs it needs, the caller. */
static void spread_done(pt_async_spread *as) {
    if (--as->pending > 0)
        return;
    pt_async_check *q = as->q;
    porteiro_t *p = q->p;
    porteiro_decision d, out;
    bool admitted = true;
    pthread_mutex_lock(&p->mu);
    porteiro_status st = pt_spread_combine(as->s, &q->call, &d);
    st = pt_path_answer_admitted(p, &q->call, st, &d, &out, q->asked_us, &admitted);
    pthread_mutex_unlock(&p->mu);
    if (!admitted)
        spread_give_back(p, as->s, &q->call);
    q->cb(p, st, st == PORTEIRO_OK ? &out : NULL, q->privdata);
    pt_spread_free(as->s);
    free(as);
    free(q);
}

static void on_sub_outcome(void *arg, const pt_outcome *o, const porteiro_decision *d) {
    struct pt_spread_ref *ref = arg;
    pt_async_spread *as = ref->as;
    porteiro_t *p = as->q->p;
    if (o->status != PORTEIRO_ERR_NOMEM) { /* as on_outcome: this master's breaker */
        pthread_mutex_lock(&p->mu);
        int64_t latency = o->sent ? o->latency_us : -1;
        bool failed = pt_status_is_redis_failure(o->status);
        if (o->again)
            pt_path_trip_stats(p, latency, failed, o->timeout, o->why);
        else {
            pt_path_round_trip(p, latency, failed, o->timeout, false, o->why);
            pt_path_nodes_round_trip(p, &o->node, &o->node_failed, 1);
        }
        pthread_mutex_unlock(&p->mu);
    }
    as->s->ss[ref->j] = o->status;
    if (o->status == PORTEIRO_OK && d != NULL)
        as->s->sd[ref->j] = *d;
    else if (o->status == PORTEIRO_OK)
        as->s->ss[ref->j] = PORTEIRO_ERR_PROTOCOL;
    spread_done(as);
}

/* Sends every slot's sub-call of q together (s: its spread). */
static void spread_send(pt_async_check *q, pt_spread *s) {
    pt_async_spread *as = malloc(sizeof(*as));
    if (as == NULL) {
        pt_spread_free(s);
        answer(q, PORTEIRO_ERR_NOMEM, NULL);
        return;
    }
    as->q = q;
    as->s = s;
    as->pending = s->nsub + 1;
    for (size_t j = 0; j < s->nsub; j++) {
        as->refs[j] = (struct pt_spread_ref){as, j};
        pt_acluster_check(q->p->acluster, &s->subs[j], on_sub_outcome, &as->refs[j]);
    }
    spread_done(as);
}

/* The cluster's node table, shared with the blocking router under mu. */
static int node_index_of(void *ctx, const char *host, size_t hostlen, int port) {
    porteiro_t *p = ctx;
    pthread_mutex_lock(&p->mu);
    int i = pt_cluster_node_add(pt_router_cluster(p->redis), host, hostlen, port);
    pthread_mutex_unlock(&p->mu);
    return i;
}

static void node_url_of(void *ctx, int i, pt_redis_url *url) {
    porteiro_t *p = ctx;
    pthread_mutex_lock(&p->mu);
    *url = *pt_cluster_node_url(pt_router_cluster(p->redis), (size_t)i);
    pthread_mutex_unlock(&p->mu);
}

/* A cluster: the async router starts from the blocking router's map. */
static porteiro_status attach_cluster(porteiro_t *p) {
    int16_t *owner = malloc(PT_SLOTS * sizeof(*owner));
    if (owner == NULL)
        return PORTEIRO_ERR_NOMEM;
    pt_acluster_nodes nodes = {p, node_index_of, node_url_of};
    pthread_mutex_lock(&p->mu);
    pt_cluster_copy_owners(pt_router_cluster(p->redis), owner);
    pthread_mutex_unlock(&p->mu);
    p->acluster =
        pt_acluster_new(&p->loop, pt_router_target(p->redis), owner, &nodes,
                        p->opts.connect_timeout_ms, p->opts.command_timeout_ms, p->opts.batch_max);
    if (p->acluster != NULL)
        pt_acluster_set_module(p->acluster, p->opts.redis_module == PORTEIRO_MODULE_AUTO);
    free(owner);
    return p->acluster != NULL ? PORTEIRO_OK : PORTEIRO_ERR_NOMEM;
}

/* porteiro_nodes_async: the caller's callback, and where the answer goes. */
typedef struct pt_nodes_req {
    porteiro_t *p;
    porteiro_nodes_fn *cb;
    void *privdata;
} pt_nodes_req;

static void on_pinged(void *arg, const int *nodes, const bool *up, size_t n) {
    pt_nodes_req *r = arg;
    porteiro_t *p = r->p;
    porteiro_node out[PT_CLUSTER_MAX_NODES];
    pthread_mutex_lock(&p->mu);
    for (size_t k = 0; k < n; k++) {
        pt_router_node_name(p->redis, (size_t)nodes[k], out[k].name, sizeof(out[k].name));
        out[k].breaker_state = (int)p->node_breakers[nodes[k]].state;
        out[k].up = up[k];
        out[k].module = pt_acluster_node_module(p->acluster, (size_t)nodes[k]) ||
                        pt_router_node_module(p->redis, (size_t)nodes[k]);
    }
    pthread_mutex_unlock(&p->mu);
    r->cb(p, out, n, r->privdata);
    free(r);
}

porteiro_status porteiro_nodes_async(porteiro_t *p, porteiro_nodes_fn *cb, void *privdata) {
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->acluster == NULL || p->async_closing)
        return PORTEIRO_ERR_UNSUPPORTED;
    pt_nodes_req *r = malloc(sizeof(*r));
    if (r == NULL)
        return PORTEIRO_ERR_NOMEM;
    *r = (pt_nodes_req){p, cb, privdata};
    if (pt_acluster_ping(p->acluster, on_pinged, r) != 0) {
        free(r);
        return PORTEIRO_ERR_NOMEM;
    }
    return PORTEIRO_OK;
}

static bool ops_complete(const porteiro_loop_ops *o) {
    return o->io_new != NULL && o->io_want_write != NULL && o->io_free != NULL &&
           o->timer_new != NULL && o->timer_start != NULL && o->timer_fire_soon != NULL &&
           o->timer_stop != NULL && o->timer_free != NULL; /* now_us may be NULL */
}

porteiro_status porteiro_attach_loop(porteiro_t *p, const porteiro_loop_ops *ops, void *ctx) {
    if (p == NULL || ops == NULL)
        return PORTEIRO_ERR_INVALID;
    if (!ops_complete(ops)) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "porteiro_attach_loop: a function of the loop is NULL");
        return PORTEIRO_ERR_INVALID;
    }
    if (p->redis == NULL)
        return PORTEIRO_OK; /* the memory backend needs no loop */
    if (p->aconn != NULL || p->acluster != NULL) {
        if (p->loop.ops == ops && p->loop.ctx == ctx)
            return PORTEIRO_OK;
        snprintf(p->errmsg, sizeof(p->errmsg), "the handle is already attached to another loop");
        return PORTEIRO_ERR_INVALID;
    }
    p->loop = (pt_loop){ops, ctx};
    if (pt_router_is_cluster(p->redis))
        return attach_cluster(p);
    p->aconn = pt_aconn_new(&p->loop, pt_router_target(p->redis), p->opts.connect_timeout_ms,
                            p->opts.command_timeout_ms, p->opts.batch_max);
    if (p->aconn != NULL)
        pt_aconn_set_module(p->aconn, p->opts.redis_module == PORTEIRO_MODULE_AUTO);
    return p->aconn != NULL ? PORTEIRO_OK : PORTEIRO_ERR_NOMEM;
}

/* A request that cannot be decided: the callback is never called. */
static bool is_bad_request(porteiro_status st) {
    return st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_UNSUPPORTED;
}

/* The memory backend decides at once: the callback runs before return. */
static porteiro_status answer_now(porteiro_t *p, porteiro_status st, const porteiro_decision *d,
                                  porteiro_decision_fn *cb, void *privdata) {
    if (is_bad_request(st))
        return st;
    cb(p, st, st == PORTEIRO_OK ? d : NULL, privdata);
    return PORTEIRO_OK;
}

static bool attached(porteiro_t *p) {
    if ((p->aconn != NULL || p->acluster != NULL) && !p->async_closing)
        return true;
    snprintf(p->errmsg, sizeof(p->errmsg), "porteiro_attach_loop (or _libevent) was not called");
    return false;
}

/* Validates a request into a call (porteiro_request or
 * porteiro_multi_request); the message goes to p->errmsg. */
typedef porteiro_status prepare_fn(porteiro_t *p, const void *req, pt_call *call);

static porteiro_status prepare_single(porteiro_t *p, const void *req, pt_call *call) {
    return pt_prepare(p, req, call);
}

static porteiro_status prepare_multi(porteiro_t *p, const void *req, pt_call *call) {
    porteiro_status st =
        pt_call_prepare_multi(call, p->prefix, p->prefix_len, req, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK) {
        pt_top_tag_multi(p->top, call, req);
        if (call->lease.max_ms == 0) /* none of its own: the handle's */
            call->lease = p->opts.quota_lease;
    }
    return st;
}

/* A policy's check: counted in the top keys under its name, and spent from
 * the policy's quota lease when it has one. */
typedef struct pt_policy_req {
    porteiro_request req;
    const char *name;
    porteiro_quota_lease lease;
} pt_policy_req;

static porteiro_status prepare_policy(porteiro_t *p, const void *req, pt_call *call) {
    const pt_policy_req *pr = req;
    porteiro_status st = pt_prepare_in(p, &pr->req, pr->name, call);
    if (st != PORTEIRO_OK)
        return st;
    pt_top_tag(p->top, call, 0, pr->name);
    if (pr->lease.max_ms > 0)
        call->lease = pr->lease;
    return st;
}

/* A check on the ordinary path (no lease): a denial the deny cache holds,
 * the breaker open, or Redis. The callback runs exactly once. */
static void ordinary(pt_async_check *q) {
    porteiro_t *p = q->p;
    porteiro_decision cached;
    pthread_mutex_lock(&p->mu);
    bool hit = pt_path_cached(p, &q->call, &cached);
    bool send = false, nomem = false;
    pt_spread *spread = NULL; /* a multi-key check over several slots */
    if (!hit && p->acluster != NULL && pt_spread_applies(p, &q->call)) {
        spread = pt_spread_new(&q->call);
        nomem = spread == NULL;
        /* Every slot's master must be open to it: none is sent otherwise. */
        send = spread != NULL;
        for (size_t j = 0; send && j < spread->nsub; j++)
            send = pt_path_node_gate(p, pt_acluster_node_of(p->acluster, &spread->subs[j]));
        if (send)
            p->stats.cross_slot_checks++;
    } else if (!hit) {
        send = p->acluster != NULL
                   ? pt_path_node_gate(p, pt_acluster_node_of(p->acluster, &q->call))
                   : pt_path_gate(p, 1);
    }
    pthread_mutex_unlock(&p->mu);
    if (hit) {
        answer(q, PORTEIRO_OK, &cached);
    } else if (nomem) {
        answer(q, PORTEIRO_ERR_NOMEM, NULL);
    } else if (send && spread != NULL) {
        q->asked_us = pt_clock_us();
        spread_send(q, spread);
    } else if (send) {
        q->asked_us = pt_clock_us();
        if (p->acluster != NULL)
            pt_acluster_check(p->acluster, &q->call, on_outcome, q);
        else
            pt_aconn_check(p->aconn, &q->call, on_outcome, q);
    } else {
        pt_spread_free(spread);
        /* Held back by a master's open breaker: its replica may have taken
         * over since; the map is read again (rate-limited). */
        if (p->acluster != NULL)
            pt_acluster_suspect(p->acluster);
        answer(q, PORTEIRO_ERR_CIRCUIT_OPEN, NULL);
    }
}

/* Validates req, then sends it, or answers at once (a denial the deny cache
 * holds, the breaker open). on_error and shadow are the policy's (on_error
 * -1: the handle's). */
static porteiro_status submit(porteiro_t *p, prepare_fn *prepare, const void *req, int on_error,
                              bool shadow, bool refund, porteiro_decision_fn *cb, void *privdata) {
    pt_async_check *q = malloc(sizeof(*q));
    if (q == NULL)
        return PORTEIRO_ERR_NOMEM;
    q->p = p;
    q->cb = cb;
    q->privdata = privdata;
    q->asked_us = -1;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_status st = prepare(p, req, &q->call);
    q->call.on_error = on_error;
    /* A multi-key check brings its own shadow flag (a failed prepare left
     * the call unset: it is not read then). */
    if (st == PORTEIRO_OK)
        q->call.shadow = q->call.shadow || shadow;
    if (st == PORTEIRO_OK && refund) {
        q->call.refund = true;
        q->call.max_wait_ms = 0;
        if (q->call.cost == 0) {
            snprintf(p->errmsg, sizeof(p->errmsg), "a refund gives back at least 1 unit");
            st = PORTEIRO_ERR_INVALID;
        } else if (p->deny_cache != NULL) {
            pt_deny_cache_forget_all(p->deny_cache); /* units come back */
        }
    }
    bool lease = st == PORTEIRO_OK && (p->aconn != NULL || p->acluster != NULL) &&
                 pt_quota_applies(p, &q->call);
    pthread_mutex_unlock(&p->mu);
    if (st != PORTEIRO_OK) {
        free(q);
        return st;
    }
    /* A quota lease answers, or asks for the next (limiter/quota.c). */
    if (lease && pt_quota_async(p, &q->call, cb, privdata) == PORTEIRO_OK) {
        free(q);
        return PORTEIRO_OK;
    }
    ordinary(q);
    return PORTEIRO_OK;
}

porteiro_status pt_async_ordinary(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                  void *privdata) {
    pt_async_check *q = malloc(sizeof(*q));
    if (q == NULL)
        return PORTEIRO_ERR_NOMEM;
    *q = (pt_async_check){.p = p, .cb = cb, .privdata = privdata, .asked_us = -1};
    pt_call_copy(&q->call, call);
    ordinary(q);
    return PORTEIRO_OK;
}

static porteiro_status check_multi_async(porteiro_t *p, const porteiro_multi_request *req,
                                         porteiro_decision_fn *cb, void *privdata);
static porteiro_status check_policy_async(porteiro_t *p, const porteiro_policy *policy,
                                          const void *key, size_t key_len, int64_t cost,
                                          int64_t now_ms, int64_t max_wait_ms,
                                          porteiro_decision_fn *cb, void *privdata);

porteiro_status porteiro_check_async(porteiro_t *p, const porteiro_request *req,
                                     porteiro_decision_fn *cb, void *privdata) {
    porteiro_decision d;
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (req != NULL && (req->policy != NULL || req->multi != NULL)) {
        int kind = pt_request_kind(p, req);
        if (kind < 0)
            return PORTEIRO_ERR_INVALID;
        porteiro_status rst = PT_RESERVED_OK(p, req, "porteiro_request");
        if (rst != PORTEIRO_OK)
            return rst;
        if (kind == 1 && (rst = PT_RESERVED_OK(p, req->policy, "porteiro_policy")) != PORTEIRO_OK)
            return rst;
        return kind == 1 ? check_policy_async(p, req->policy, req->key, req->key_len, req->cost,
                                              req->now_ms, req->max_wait_ms, cb, privdata)
                         : check_multi_async(p, req->multi, cb, privdata);
    }
    if (p->redis == NULL)
        return answer_now(p, porteiro_check_request(p, req, &d), &d, cb, privdata);
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    return submit(p, prepare_single, req, -1, false, false, cb, privdata);
}

static porteiro_status prepare_refund(porteiro_t *p, const void *req, pt_call *call) {
    return pt_refund_prepare(p, req, call);
}

porteiro_status porteiro_refund_async(porteiro_t *p, const porteiro_request *req,
                                      porteiro_decision_fn *cb, void *privdata) {
    porteiro_decision d;
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL)
        return answer_now(p, porteiro_refund(p, req, &d), &d, cb, privdata);
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    return submit(p, prepare_refund, req, -1, false, true, cb, privdata);
}

static porteiro_status check_multi_async(porteiro_t *p, const porteiro_multi_request *req,
                                         porteiro_decision_fn *cb, void *privdata) {
    porteiro_decision d;
    if (p->redis == NULL)
        return answer_now(p, pt_check_multi(p, req, &d), &d, cb, privdata);
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    return submit(p, prepare_multi, req, -1, false, false, cb, privdata);
}

/* A policy with a home (docs/regions.md) on the loop: prepared as the
 * blocking path prepares it, then limiter/global.c. PORTEIRO_ERR_UNSUPPORTED:
 * not a global check after all (a wait, a peek: the ordinary path). */
static porteiro_status global_policy_async(porteiro_t *p, const porteiro_policy *policy,
                                           const void *key, size_t key_len, int64_t cost,
                                           int64_t now_ms, int64_t max_wait_ms,
                                           porteiro_decision_fn *cb, void *privdata) {
    pt_call *call = malloc(sizeof(*call));
    if (call == NULL)
        return PORTEIRO_ERR_NOMEM;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_request req = {.limits = policy->limits,
                            .nlimits = policy->nlimits,
                            .key = key,
                            .key_len = key_len,
                            .cost = cost,
                            .now_ms = now_ms,
                            .max_wait_ms = max_wait_ms};
    porteiro_status st = pt_prepare_in(p, &req, policy->name, call);
    if (st == PORTEIRO_OK) {
        call->on_error = policy->has_on_error ? (int)policy->on_error : -1;
        call->shadow = policy->shadow;
        pt_top_tag(p->top, call, 0, policy->name);
        if (policy->lease.max_ms > 0)
            call->lease = policy->lease;
        st = pt_global_prepare(p, policy, call);
    }
    bool global = st == PORTEIRO_OK && pt_global_applies(p, call);
    porteiro_decision cached, out;
    bool hit = global && pt_path_cached(p, call, &cached);
    porteiro_status ast = hit ? pt_path_answer(p, call, PORTEIRO_OK, &cached, &out, -1) : st;
    pthread_mutex_unlock(&p->mu);
    if (st == PORTEIRO_OK && !global)
        st = PORTEIRO_ERR_UNSUPPORTED;
    else if (hit)
        cb(p, ast, ast == PORTEIRO_OK ? &out : NULL, privdata);
    else if (st == PORTEIRO_OK)
        st = pt_global_async(p, call, cb, privdata);
    free(call);
    return st;
}

static porteiro_status check_policy_async(porteiro_t *p, const porteiro_policy *policy,
                                          const void *key, size_t key_len, int64_t cost,
                                          int64_t now_ms, int64_t max_wait_ms,
                                          porteiro_decision_fn *cb, void *privdata) {
    porteiro_decision d;
    /* A global limit (docs/regions.md) on a cluster is decided blocking, on
     * this thread (the loop form takes one regional node). */
    if (p->redis == NULL || (policy->global_home != NULL && p->acluster != NULL))
        return answer_now(p,
                          pt_check_policy(p, policy, key, key_len, cost, now_ms, max_wait_ms, &d),
                          &d, cb, privdata);
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    if (policy->has_on_error && (unsigned)policy->on_error > PORTEIRO_ON_ERROR_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "policy: unknown on_error mode");
        return PORTEIRO_ERR_INVALID;
    }
    if (policy->global_home != NULL) {
        porteiro_status gst =
            global_policy_async(p, policy, key, key_len, cost, now_ms, max_wait_ms, cb, privdata);
        if (gst != PORTEIRO_ERR_UNSUPPORTED)
            return gst;
    }
    pt_policy_req req = {{.limits = policy->limits,
                          .nlimits = policy->nlimits,
                          .key = key,
                          .key_len = key_len,
                          .cost = cost,
                          .now_ms = now_ms,
                          .max_wait_ms = max_wait_ms},
                         policy->name,
                         policy->lease};
    return submit(p, prepare_policy, &req, policy->has_on_error ? (int)policy->on_error : -1,
                  policy->shadow, false, cb, privdata);
}

/* A settle (issue 38; limiter/settle.c): the admitted check (limits, a
 * policy's or a multi-key one) and the units it really used. */
typedef struct pt_settle_req {
    const porteiro_request *req;
    const porteiro_usage *usage;
} pt_settle_req;

static porteiro_status prepare_settle(porteiro_t *p, const void *req, pt_call *call) {
    const pt_settle_req *sr = req;
    return pt_settle_prepare_request(p, sr->req, sr->usage, call);
}

porteiro_status porteiro_settle_async(porteiro_t *p, const porteiro_request *req,
                                      const porteiro_usage *usage, porteiro_decision_fn *cb,
                                      void *privdata) {
    porteiro_decision d;
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL)
        return answer_now(p, porteiro_settle(p, req, usage, &d), &d, cb, privdata);
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    /* A policy's on_error override (submit sets it after the prepare). */
    const porteiro_policy *policy = req != NULL ? req->policy : NULL;
    int on_error = policy != NULL && policy->has_on_error ? (int)policy->on_error : -1;
    pt_settle_req sr = {req, usage};
    return submit(p, prepare_settle, &sr, on_error, false, false, cb, privdata);
}

void pt_async_free(porteiro_t *p) {
    /* Checks still in flight get their callback now (a fallback). */
    p->async_closing = true;
    pt_global_async_free(p);
    pt_acluster_free(p->acluster);
    p->acluster = NULL;
    pt_aconn_free(p->aconn);
    p->aconn = NULL;
}
