/* policy_api.c — a policy's check (its on_error override and shadow mode)
 * and a multi-key one, as porteiro_check_request dispatches them, and
 * porteiro_refund (of limits or a policy's). */
#include <stdio.h>
#include <string.h>

#include "limiter/decide.h"
#include "limiter/global.h"
#include "limiter/top.h"

porteiro_status pt_check_policy(porteiro_t *p, const porteiro_policy *policy, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, int64_t max_wait_ms,
                                porteiro_decision *decision) {
    pt_call call;
    porteiro_status st;
    if (p == NULL || policy == NULL || decision == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    if (policy->has_on_error && (unsigned)policy->on_error > PORTEIRO_ON_ERROR_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "policy: unknown on_error mode");
        st = PORTEIRO_ERR_INVALID;
    } else if ((st = PT_RESERVED_OK(p, policy, "porteiro_policy")) == PORTEIRO_OK) {
        porteiro_request req = {.limits = policy->limits,
                                .nlimits = policy->nlimits,
                                .key = key,
                                .key_len = key_len,
                                .cost = cost,
                                .now_ms = now_ms,
                                .max_wait_ms = max_wait_ms};
        st = pt_prepare_in(p, &req, policy->name, &call);
    }
    if (st == PORTEIRO_OK) {
        /* The policy's own mode wins over the handle's (pt_fallback); in
         * shadow mode a denial is reported, not enforced (pt_path_answer). */
        call.on_error = policy->has_on_error ? (int)policy->on_error : -1;
        call.shadow = policy->shadow;
        pt_top_tag(p->top, &call, 0, policy->name);
        if (policy->lease.max_ms > 0)
            call.lease = policy->lease;
        st = pt_global_prepare(p, policy, &call);
    }
    if (st == PORTEIRO_OK) {
        porteiro_status one;
        st = pt_decide(p, &call, 1, decision, &one);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

porteiro_status pt_check_multi(porteiro_t *p, const porteiro_multi_request *req,
                               porteiro_decision *decision) {
    pt_call call;
    if (p == NULL || decision == NULL)
        return PORTEIRO_ERR_INVALID;
    pt_lock_for_check(p);
    p->errmsg[0] = '\0';
    porteiro_status st =
        pt_call_prepare_multi(&call, p->prefix, p->prefix_len, req, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK) {
        pt_top_tag_multi(p->top, &call, req);
        if (call.lease.max_ms == 0) /* none of its own: the handle's */
            call.lease = p->opts.quota_lease;
        porteiro_status one;
        st = pt_decide(p, &call, 1, decision, &one);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

porteiro_status pt_refund_prepare(porteiro_t *p, const porteiro_request *req, pt_call *call) {
    if (req == NULL)
        return pt_prepare_in(p, req, NULL, call); /* its message */
    int kind = pt_request_kind(p, req);
    if (kind < 0)
        return PORTEIRO_ERR_INVALID;
    if (kind == 0)
        return pt_prepare_in(p, req, NULL, call);
    porteiro_status st = PT_RESERVED_OK(p, req, "porteiro_request");
    if (st != PORTEIRO_OK)
        return st;
    if (kind == 2) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "a refund takes limits or a policy, not items: give a multi-key check's units "
                 "back with porteiro_settle (used 0)");
        return PORTEIRO_ERR_UNSUPPORTED;
    }
    const porteiro_policy *policy = req->policy;
    if ((st = PT_RESERVED_OK(p, policy, "porteiro_policy")) != PORTEIRO_OK)
        return st;
    /* Its own counters (its name in the keys), none of its check's extras. */
    porteiro_request in = {.limits = policy->limits,
                           .nlimits = policy->nlimits,
                           .key = req->key,
                           .key_len = req->key_len,
                           .cost = req->cost,
                           .now_ms = req->now_ms,
                           .max_wait_ms = 0};
    return pt_prepare_in(p, &in, policy->name, call);
}

porteiro_status porteiro_refund(porteiro_t *p, const porteiro_request *req,
                                porteiro_decision *decision) {
    pt_call call;
    if (p == NULL || decision == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_status st = pt_refund_prepare(p, req, &call);
    if (st == PORTEIRO_OK && call.cost == 0) {
        snprintf(p->errmsg, sizeof(p->errmsg), "a refund gives back at least 1 unit");
        st = PORTEIRO_ERR_INVALID;
    }
    if (st == PORTEIRO_OK) {
        call.refund = true;
        porteiro_status one;
        st = pt_decide(p, &call, 1, decision, &one);
        /* Units came back: a remembered denial may no longer hold. */
        if (p->deny_cache != NULL)
            pt_deny_cache_forget_all(p->deny_cache);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}
