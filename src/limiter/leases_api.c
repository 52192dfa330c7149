/* leases_api.c — porteiro_acquire / _release / _renew: validation, the
 * backend (Redis script or memory), and what a Redis failure turns into. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/algorithms.h"
#include "limiter/decide.h"
#include "core/leases.h"
#include "redis/command.h"

static porteiro_status invalid(porteiro_t *p, const char *msg) {
    snprintf(p->errmsg, sizeof(p->errmsg), "%s", msg);
    return PORTEIRO_ERR_INVALID;
}

/* Fills op for kind on key; limit and lease_ms are checked where used. */
static porteiro_status prepare(porteiro_t *p, pt_lease_op *op, pt_lease_kind kind, const void *key,
                               size_t key_len, int64_t now_ms) {
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->now_ms = now_ms;
    if ((now_ms < 0 && now_ms != PORTEIRO_NOW) || now_ms > PT_MAX_NOW_MS)
        return invalid(p, "now_ms must be between 0 and 2^50 (or PORTEIRO_NOW)");
    op->key = op->key_buf;
    return pt_lease_key(op->key_buf, &op->key_len, p->prefix, p->prefix_len, key, key_len,
                        p->errmsg, sizeof(p->errmsg));
}

static porteiro_status check_lease_ms(porteiro_t *p, int64_t lease_ms) {
    if (lease_ms <= 0 || lease_ms > PORTEIRO_MAX_PERIOD_MS)
        return invalid(p, "the lease time must be between 1 ms and 366 days");
    return PORTEIRO_OK;
}

/* One script call, EVALSHA then EVAL once if the script cache was empty. */
static porteiro_status redis_call(porteiro_t *p, const pt_lease_op *op, pt_lease_out *out) {
    pt_command cmd;
    redisReply *reply = NULL;
    pt_command_lease(&cmd, op, true);
    porteiro_status st = pt_router_command_key(p->redis, op->key, op->key_len, cmd.argc, cmd.argv,
                                               cmd.argvlen, &reply, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK && pt_reply_is_noscript(reply)) {
        freeReplyObject(reply);
        reply = NULL;
        pt_command_lease(&cmd, op, false);
        st = pt_router_command_key(p->redis, op->key, op->key_len, cmd.argc, cmd.argv, cmd.argvlen,
                                   &reply, p->errmsg, sizeof(p->errmsg));
    }
    if (st == PORTEIRO_OK)
        st = pt_reply_lease(reply, op, out, p->errmsg, sizeof(p->errmsg));
    if (reply != NULL)
        freeReplyObject(reply);
    return st;
}

/* Redis behind the circuit breaker, with the round trip counted (decide.h). */
static porteiro_status redis_guarded(porteiro_t *p, const pt_lease_op *op, pt_lease_out *out) {
    if (!pt_path_gate(p, 1))
        return PORTEIRO_ERR_CIRCUIT_OPEN;
    int64_t t0 = pt_clock_us();
    porteiro_status st = redis_call(p, op, out);
    bool failed = pt_status_is_redis_failure(st);
    pt_path_round_trip(p, pt_clock_us() - t0, failed, st == PORTEIRO_ERR_TIMEOUT, failed, NULL);
    return st;
}

/* The local fallback: the memory backend, with L divided as for checks. */
static porteiro_status local(porteiro_t *p, const pt_lease_op *op, pt_lease_out *out) {
    pt_lease_op mine = *op;
    mine.key = mine.key_buf;
    if (p->opts.local_divisor > 1)
        mine.limit = op->limit / p->opts.local_divisor > 0 ? op->limit / p->opts.local_divisor : 1;
    return pt_memory_lease(p->memory, &mine, out);
}

/* Runs op on the handle's backend. *fallback says how an acquire was
 * decided when Redis failed. Caller holds p->mu. */
static porteiro_status run(porteiro_t *p, const pt_lease_op *op, pt_lease_out *out,
                           porteiro_fallback *fallback, porteiro_status *reason) {
    *fallback = PORTEIRO_FALLBACK_NONE;
    *reason = PORTEIRO_OK;
    if (p->redis == NULL)
        return pt_memory_lease(p->memory, op, out);
    porteiro_status st = redis_guarded(p, op, out);
    if (!pt_status_is_redis_failure(st) || p->opts.on_error == PORTEIRO_ON_ERROR_ERROR)
        return st;
    *reason = st;
    if (p->opts.on_error == PORTEIRO_ON_ERROR_LOCAL) {
        porteiro_status lst = local(p, op, out);
        /* A release or renew only answers locally for a local lease. */
        if (lst != PORTEIRO_OK || (op->kind != PT_LEASE_ACQUIRE && !out->found))
            return st;
        *fallback = PORTEIRO_FALLBACK_LOCAL;
        return PORTEIRO_OK;
    }
    if (op->kind != PT_LEASE_ACQUIRE)
        return st; /* open / closed say nothing about one lease */
    bool allow = p->opts.on_error == PORTEIRO_ON_ERROR_OPEN;
    out->result = (porteiro_result){
        .allowed = allow,
        .limit = op->limit,
        .remaining = allow ? op->limit : 0,
        .retry_after_ms = allow ? 0 : p->opts.breaker_cooldown_ms,
    };
    *fallback = allow ? PORTEIRO_FALLBACK_OPEN : PORTEIRO_FALLBACK_CLOSED;
    return PORTEIRO_OK;
}

porteiro_status porteiro_acquire(porteiro_t *p, int64_t limit, int64_t lease_ms, const void *key,
                                 size_t key_len, int64_t now_ms, porteiro_decision *decision,
                                 char lease_id[PORTEIRO_LEASE_ID_LEN + 1]) {
    pt_lease_op op;
    pt_lease_out out;
    porteiro_fallback fallback;
    porteiro_status reason;
    if (p == NULL || decision == NULL || lease_id == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    lease_id[0] = '\0';
    porteiro_status st = prepare(p, &op, PT_LEASE_ACQUIRE, key, key_len, now_ms);
    if (st == PORTEIRO_OK && (limit <= 0 || limit > PORTEIRO_MAX_LEASES))
        st = invalid(p, "concurrency: limit must be between 1 and 10000");
    if (st == PORTEIRO_OK)
        st = check_lease_ms(p, lease_ms);
    if (st == PORTEIRO_OK && pt_lease_new_id(op.id) != 0)
        st = invalid(p, "no randomness available for a lease id");
    op.limit = limit;
    op.lease_ms = lease_ms;
    if (st == PORTEIRO_OK)
        st = run(p, &op, &out, &fallback, &reason);
    if (st == PORTEIRO_OK) {
        memset(decision, 0, sizeof(*decision));
        decision->nlimits = 1;
        decision->limits[0] = out.result;
        pt_decision_finish(decision);
        decision->fallback = fallback;
        decision->fallback_reason = reason;
        if (out.result.allowed)
            memcpy(lease_id, op.id, PORTEIRO_LEASE_ID_LEN + 1);
        pt_stats_decision(&p->stats, st, decision);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* release and renew: the same shape, a yes/no answer. */
static porteiro_status release_or_renew(porteiro_t *p, pt_lease_kind kind, int64_t lease_ms,
                                        const void *key, size_t key_len, const char *lease_id,
                                        int64_t now_ms, bool *found) {
    pt_lease_op op;
    pt_lease_out out;
    porteiro_fallback fallback;
    porteiro_status reason;
    if (p == NULL || found == NULL)
        return PORTEIRO_ERR_INVALID;
    *found = false;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_status st = prepare(p, &op, kind, key, key_len, now_ms);
    if (st == PORTEIRO_OK && !pt_lease_id_valid(lease_id))
        st = invalid(p, "a lease id is 32 lowercase hex characters");
    if (st == PORTEIRO_OK && kind == PT_LEASE_RENEW)
        st = check_lease_ms(p, lease_ms);
    if (st == PORTEIRO_OK) {
        memcpy(op.id, lease_id, PORTEIRO_LEASE_ID_LEN + 1);
        op.lease_ms = lease_ms;
        st = run(p, &op, &out, &fallback, &reason);
    }
    if (st == PORTEIRO_OK)
        *found = out.found;
    pthread_mutex_unlock(&p->mu);
    return st;
}

porteiro_status porteiro_release(porteiro_t *p, const void *key, size_t key_len,
                                 const char *lease_id, int64_t now_ms, bool *released) {
    return release_or_renew(p, PT_LEASE_RELEASE, 0, key, key_len, lease_id, now_ms, released);
}

porteiro_status porteiro_renew(porteiro_t *p, int64_t lease_ms, const void *key, size_t key_len,
                               const char *lease_id, int64_t now_ms, bool *renewed) {
    return release_or_renew(p, PT_LEASE_RENEW, lease_ms, key, key_len, lease_id, now_ms, renewed);
}
