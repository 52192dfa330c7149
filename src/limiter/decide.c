/* decide.c — the one decision path (decide.h), and pt_decide: the blocking
 * transport, with one budget per check that counts time queued on the
 * handle's mutex. */
#include "limiter/decide.h"
#include "limiter/global.h"
#include "limiter/top.h"
#include "limiter/quota.h"
#include "limiter/spread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t pt_clock_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Registers a caller about to block on mu; returns its slot or -1. */
static int wait_slot(porteiro_t *p, int64_t started) {
    for (int i = 0; i < PT_MAX_WAITERS; i++) {
        int64_t free_slot = 0;
        if (atomic_compare_exchange_strong(&p->waiting_since_us[i], &free_slot, started))
            return i;
    }
    return -1; /* more waiters than slots: this one only gets its own budget */
}

void pt_lock_for_check(porteiro_t *p) {
    int64_t started = pt_clock_us();
    if (pthread_mutex_trylock(&p->mu) != 0) {
        int slot = wait_slot(p, started);
        pthread_mutex_lock(&p->mu);
        if (slot >= 0)
            atomic_store(&p->waiting_since_us[slot], 0);
    }
    p->check_started_us = started;
}

/* The earliest call time among callers blocked on mu, or `mine`. Callers
 * arriving later have later deadlines than the holder's own. */
static int64_t oldest_waiter(porteiro_t *p, int64_t mine) {
    int64_t oldest = mine;
    for (int i = 0; i < PT_MAX_WAITERS; i++) {
        int64_t t = atomic_load(&p->waiting_since_us[i]);
        if (t != 0 && t < oldest)
            oldest = t;
    }
    return oldest;
}

/* One round trip for the calls, within the deadline. */
static void call_redis(porteiro_t *p, const pt_call *calls, size_t n, porteiro_decision *decisions,
                       porteiro_status *statuses, int64_t deadline_us) {
    int one_node = 0;
    bool one_failed = false;
    int *nodes = n == 1 ? &one_node : malloc(n * sizeof(*nodes));
    bool *node_failed = n == 1 ? &one_failed : malloc(n * sizeof(*node_failed));
    int64_t t0 = pt_clock_us();
    porteiro_status trip = PORTEIRO_ERR_NOMEM;
    if (nodes != NULL && node_failed != NULL)
        trip = pt_router_check_many_until(p->redis, deadline_us, calls, n, decisions, statuses,
                                          nodes, node_failed, p->errmsg, sizeof(p->errmsg));
    else
        for (size_t i = 0; i < n; i++)
            statuses[i] = PORTEIRO_ERR_NOMEM;
    bool failed = trip != PORTEIRO_OK;
    for (size_t i = 0; i < n; i++)
        failed = failed || pt_status_is_redis_failure(statuses[i]);
    bool cluster = pt_router_is_cluster(p->redis);
    /* On a cluster the handle's breaker stays closed: each master has its own. */
    pt_path_round_trip(p, pt_clock_us() - t0, failed, trip == PORTEIRO_ERR_TIMEOUT,
                       !cluster && trip != PORTEIRO_OK, NULL);
    if (cluster && nodes != NULL && node_failed != NULL)
        pt_path_nodes_round_trip(p, nodes, node_failed, n);
    if (n > 1) {
        free(nodes);
        free(node_failed);
    }
}

static void fail_all(porteiro_status *statuses, size_t n, porteiro_status st) {
    for (size_t i = 0; i < n; i++)
        statuses[i] = st;
}

void pt_path_nodes_round_trip(porteiro_t *p, const int *nodes, const bool *node_failed, size_t n) {
    bool seen[PT_CLUSTER_MAX_NODES] = {false}, bad[PT_CLUSTER_MAX_NODES] = {false};
    for (size_t i = 0; i < n; i++) {
        if (nodes[i] < 0 || nodes[i] >= PT_CLUSTER_MAX_NODES)
            continue;
        seen[nodes[i]] = true;
        bad[nodes[i]] = bad[nodes[i]] || node_failed[i];
    }
    int64_t now = pt_breaker_clock();
    for (int k = 0; k < PT_CLUSTER_MAX_NODES; k++) {
        if (bad[k])
            pt_breaker_failure_because(&p->node_breakers[k], now, p->errmsg);
        else if (seen[k])
            pt_breaker_success(&p->node_breakers[k]);
    }
}

static void decide_misses(porteiro_t *p, const pt_call *calls, size_t n, const bool *hit,
                          size_t misses, porteiro_decision *decisions, porteiro_status *statuses,
                          int64_t deadline, bool gated);

/* A cluster: each master's breaker decides for its own checks; the checks
 * it lets through go to Redis together. */
static void cluster_gate_and_call(porteiro_t *p, const pt_call *calls, size_t n,
                                  porteiro_decision *decisions, porteiro_status *statuses,
                                  int64_t deadline) {
    signed char allow[PT_CLUSTER_MAX_NODES]; /* -1: not asked yet this call */
    memset(allow, -1, sizeof(allow));
    size_t pass = 0;
    /* Checks held back by a master's open breaker would never learn that
     * its replica took over: the map is read again (at most a few times a
     * second) while that lasts, or after a node failed. */
    pt_router_maintain(p->redis, deadline, p->cluster_suspect);
    bool *skip = calloc(n, sizeof(*skip));
    if (skip == NULL) {
        fail_all(statuses, n, PORTEIRO_ERR_NOMEM);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int nd = pt_router_node_of(p->redis, &calls[i]);
        if (nd >= 0 && nd < PT_CLUSTER_MAX_NODES && allow[nd] < 0)
            allow[nd] = pt_breaker_allow(&p->node_breakers[nd], pt_breaker_clock()) ? 1 : 0;
        skip[i] = nd >= 0 && nd < PT_CLUSTER_MAX_NODES && allow[nd] == 0;
        if (skip[i]) {
            statuses[i] = PORTEIRO_ERR_CIRCUIT_OPEN;
            p->stats.breaker_skips++;
            snprintf(p->errmsg, sizeof(p->errmsg),
                     "redis: circuit breaker of a cluster node "
                     "open, not called");
        } else {
            pass++;
        }
    }
    p->cluster_suspect = pass < n;
    if (pass == n)
        call_redis(p, calls, n, decisions, statuses, deadline);
    else if (pass > 0)
        decide_misses(p, calls, n, skip, pass, decisions, statuses, deadline, true);
    free(skip);
}

bool pt_path_gate(porteiro_t *p, size_t n) {
    if (pt_breaker_allow(&p->breaker, pt_breaker_clock()))
        return true;
    snprintf(p->errmsg, sizeof(p->errmsg), "redis: circuit breaker open, not called");
    p->stats.breaker_skips += n;
    return false;
}

bool pt_path_node_gate(porteiro_t *p, int node) {
    if (node < 0 || node >= PT_CLUSTER_MAX_NODES ||
        pt_breaker_allow(&p->node_breakers[node], pt_breaker_clock()))
        return true;
    p->stats.breaker_skips++;
    snprintf(p->errmsg, sizeof(p->errmsg),
             "redis: circuit breaker of a cluster node open, not "
             "called");
    return false;
}

void pt_path_trip_stats(porteiro_t *p, int64_t latency_us, bool failed, bool timeout,
                        const char *why) {
    if (why != NULL && why[0] != '\0' && failed)
        snprintf(p->errmsg, sizeof(p->errmsg), "%s", why);
    if (latency_us >= 0)
        pt_stats_round_trip(&p->stats, latency_us, failed, timeout);
    else if (failed)
        p->stats.redis_errors++; /* never sent: no latency sample */
}

void pt_path_round_trip(porteiro_t *p, int64_t latency_us, bool failed, bool timeout,
                        bool node_failed, const char *why) {
    pt_path_trip_stats(p, latency_us, failed, timeout, why);
    /* Only a failure of the node moves the breaker: an error of one key
     * (WRONGTYPE) says nothing about Redis and must not cut off the rest. */
    if (node_failed)
        pt_breaker_failure_because(&p->breaker, pt_breaker_clock(), p->errmsg);
    else
        pt_breaker_success(&p->breaker);
}

/* The deny cache's clock for call: its injected now_ms, or monotonic ms. */
static int64_t cache_clock_ms(const pt_call *call, int64_t mono_us) {
    return call->now_ms != PORTEIRO_NOW ? call->now_ms : mono_us / 1000;
}

bool pt_path_cached(porteiro_t *p, const pt_call *call, porteiro_decision *out) {
    /* A shadow item's own denial must not answer for the others, which
     * still consume: such checks always ask Redis. */
    if (p->deny_cache == NULL || call->refund || call->any_item_shadow ||
        !pt_deny_cache_get(p->deny_cache, call, cache_clock_ms(call, pt_clock_us()), out))
        return false;
    /* A check that may wait: a denial whose retry is within its wait is a
     * reservation Redis can make, never a denial from here. */
    if (call->max_wait_ms > 0 && out->retry_after_ms >= 0 &&
        out->retry_after_ms <= call->max_wait_ms)
        return false;
    p->stats.deny_cache_hits++;
    return true;
}

porteiro_status pt_path_answer(porteiro_t *p, const pt_call *call, porteiro_status st,
                               const porteiro_decision *in, porteiro_decision *out,
                               int64_t asked_us) {
    return pt_path_answer_admitted(p, call, st, in, out, asked_us, NULL);
}

porteiro_status pt_path_answer_admitted(porteiro_t *p, const pt_call *call, porteiro_status st,
                                        const porteiro_decision *in, porteiro_decision *out,
                                        int64_t asked_us, bool *admitted) {
    if (pt_status_is_redis_failure(st))
        st = pt_fallback(p, call, st, out);
    else if (st == PORTEIRO_OK && in != out)
        *out = *in;
    if (st == PORTEIRO_OK)
        pt_call_item_shadow(call, out);
    /* Redis's own denial (not a fallback's) holds until its retry: later
     * copies of this check are denied without a call. */
    if (st == PORTEIRO_OK && asked_us >= 0 && p->deny_cache != NULL && !call->refund &&
        !call->any_item_shadow)
        pt_deny_cache_put(p->deny_cache, call, cache_clock_ms(call, asked_us), out);
    if (call->settle)
        pt_stats_settle(&p->stats, st, out);
    else
        pt_stats_decision(&p->stats, st, out);
    if (p->top != NULL && st == PORTEIRO_OK) /* who is limited: limiter/top.c */
        pt_top_feed(p->top, call, out);
    if (admitted != NULL) /* what an enforced check would have done */
        *admitted = st == PORTEIRO_OK && out->allowed;
    /* Shadow: computed and counted as it is; the caller is told "would
     * deny" and lets the request through. */
    if (st == PORTEIRO_OK && call->shadow && !out->allowed) {
        out->shadow_denied = true;
        out->allowed = true;
        out->retry_after_ms = 0;
    }
    return st;
}

/* Redis decides the calls, within the deadline and the breaker's say. */
static void decide_in_redis(porteiro_t *p, const pt_call *calls, size_t n,
                            porteiro_decision *decisions, porteiro_status *statuses,
                            int64_t deadline) {
    if (pt_clock_us() >= deadline) {
        /* Spent queued behind slower checks (or one queued longer than
         * this): Redis is not asked, and the breaker is not told. */
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "redis: no budget left (checks queued on the handle)");
        fail_all(statuses, n, PORTEIRO_ERR_TIMEOUT);
    } else if (pt_router_is_cluster(p->redis)) {
        cluster_gate_and_call(p, calls, n, decisions, statuses, deadline);
    } else if (pt_path_gate(p, n)) {
        call_redis(p, calls, n, decisions, statuses, deadline);
    } else {
        fail_all(statuses, n, PORTEIRO_ERR_CIRCUIT_OPEN);
    }
}

/* Some calls were answered by the deny cache (hit[i]): Redis decides the
 * others, packed together (a rare path: a batch with cached denials). */
static void decide_misses(porteiro_t *p, const pt_call *calls, size_t n, const bool *hit,
                          size_t misses, porteiro_decision *decisions, porteiro_status *statuses,
                          int64_t deadline, bool gated) {
    /* gated: the cluster gate passes its skipped checks as hits; the others
     * go straight to Redis (their masters' breakers said yes). */
    pt_call *sub = malloc(misses * sizeof(*sub));
    porteiro_decision *sd = malloc(misses * sizeof(*sd));
    porteiro_status *ss = malloc(misses * sizeof(*ss));
    if (sub != NULL && sd != NULL && ss != NULL) {
        for (size_t i = 0, k = 0; i < n; i++)
            if (!hit[i])
                pt_call_copy(&sub[k++], &calls[i]);
        if (gated)
            call_redis(p, sub, misses, sd, ss, deadline);
        else
            decide_in_redis(p, sub, misses, sd, ss, deadline);
    } else if (ss != NULL) {
        fail_all(ss, misses, PORTEIRO_ERR_NOMEM);
    }
    for (size_t i = 0, k = 0; i < n; i++) {
        if (hit[i])
            continue;
        statuses[i] = ss != NULL ? ss[k] : PORTEIRO_ERR_NOMEM;
        if (sd != NULL && statuses[i] == PORTEIRO_OK)
            decisions[i] = sd[k];
        k++;
    }
    free(sub);
    free(sd);
    free(ss);
}

/* A multi-key check over several cluster slots (spread.h): one call per
 * slot, every slot's master written before any answer is read. Returns the
 * spread (its give-backs are sent once the answer is known), or NULL when
 * out of memory (*st says so). */
static pt_spread *spread_decide(porteiro_t *p, const pt_call *call, porteiro_decision *d,
                                porteiro_status *st, int64_t deadline) {
    pt_spread *s = pt_spread_new(call);
    if (s == NULL) {
        *st = PORTEIRO_ERR_NOMEM;
        return NULL;
    }
    p->stats.cross_slot_checks++;
    decide_in_redis(p, s->subs, s->nsub, s->sd, s->ss, deadline);
    *st = pt_spread_combine(s, call, d);
    return s;
}

/* The check was not admitted: the units its slots took go back, one call
 * per slot, pipelined to their masters, within a budget of their own (the
 * caller waits for them: a denial over several slots may take up to two
 * budgets). */
static void spread_give_back(porteiro_t *p, const pt_spread *s, const pt_call *call) {
    pt_call *gb = malloc(s->nsub * sizeof(*gb));
    size_t n = gb != NULL ? pt_spread_givebacks(s, call, gb) : 0;
    if (gb == NULL) {
        pt_spread_count(p, PORTEIRO_ERR_NOMEM, "out of memory");
        return;
    }
    porteiro_decision d[PORTEIRO_MAX_LIMITS];
    porteiro_status st[PORTEIRO_MAX_LIMITS];
    int nodes[PORTEIRO_MAX_LIMITS];
    bool node_failed[PORTEIRO_MAX_LIMITS];
    char why[256] = "";
    if (n > 0) {
        int64_t deadline = pt_clock_us() + (int64_t)p->opts.command_timeout_ms * 1000;
        pt_router_check_many_until(p->redis, deadline, gb, n, d, st, nodes, node_failed, why,
                                   sizeof(why));
        pt_path_nodes_round_trip(p, nodes, node_failed, n);
    }
    for (size_t k = 0; k < n; k++)
        pt_spread_count(p, st[k], why);
    free(gb);
}

porteiro_status pt_decide(porteiro_t *p, const pt_call *calls, size_t n,
                          porteiro_decision *decisions, porteiro_status *statuses) {
    porteiro_status first = PORTEIRO_OK;
    /* The budget runs from the call, queueing on the handle included. */
    int64_t started = p->check_started_us != 0 ? p->check_started_us : pt_clock_us();
    int64_t deadline = oldest_waiter(p, started) + (int64_t)p->opts.command_timeout_ms * 1000;
    p->check_started_us = 0;

    bool one_hit = false;
    pt_spread *spread = NULL; /* a multi-key check over several cluster slots */
    bool *hit = n == 1 ? &one_hit : calloc(n, sizeof(*hit));
    if (hit == NULL)
        return PORTEIRO_ERR_NOMEM;
    size_t hits = 0;
    for (size_t i = 0; p->redis != NULL && i < n; i++) {
        hit[i] = pt_path_cached(p, &calls[i], &decisions[i]);
        if (hit[i]) {
            statuses[i] = PORTEIRO_OK;
            hits++;
        }
    }
    if (p->redis == NULL) {
        for (size_t i = 0; i < n; i++)
            statuses[i] = pt_memory_check(p->memory, &calls[i], 1, &decisions[i]);
    } else if (hits == 0 && n == 1 && pt_global_applies(p, calls)) {
        /* One limit across regions (limiter/global.c): its own answer. */
        statuses[0] = pt_global_decide(p, calls, decisions, started);
        return statuses[0];
    } else if (hits == 0 && n == 1 && pt_quota_applies(p, calls) &&
               pt_quota_decide(p, calls, decisions, started, &statuses[0])) {
        /* A quota lease answered, or took the next one (limiter/quota.c). */
        return statuses[0];
    } else if (hits == 0 && n == 1 && pt_spread_applies(p, calls)) {
        spread = spread_decide(p, calls, decisions, statuses, deadline);
    } else if (hits == 0) {
        decide_in_redis(p, calls, n, decisions, statuses, deadline);
    } else if (hits < n) {
        decide_misses(p, calls, n, hit, n - hits, decisions, statuses, deadline, false);
    }
    for (size_t i = 0; i < n; i++) {
        int64_t asked = p->redis != NULL && !hit[i] ? started : -1;
        bool admitted = true;
        statuses[i] = pt_path_answer_admitted(p, &calls[i], statuses[i], &decisions[i],
                                              &decisions[i], asked, &admitted);
        if (spread != NULL && !admitted)
            spread_give_back(p, spread, &calls[0]);
        if (first == PORTEIRO_OK)
            first = statuses[i];
    }
    pt_spread_free(spread);
    if (n > 1)
        free(hit);
    return first;
}
