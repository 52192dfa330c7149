/* settle.c — porteiro_settle (issue 38): an admitted check's real cost
 * (limits, a policy's or a multi-key check's), blocking. The async forms are in async.c;
 * the arithmetic in core/settle.c (and src/lua/settle.lua). */
#include "limiter/settle.h"

#include <stdio.h>

#include "core/settle.h"
#include "limiter/decide.h"
#include "limiter/top.h"

/* A settle's common fields, once its deltas are set. refund too: batches,
 * the deny cache, quota leases and the top keys leave settles out as they
 * leave refunds out. */
static void mark_settle(porteiro_t *p, pt_call *call, int64_t age_ms) {
    call->settle = true;
    call->refund = true;
    call->age_ms = age_ms;
    call->max_wait_ms = 0;
    call->lease = (porteiro_quota_lease){0, 0, 0};
    bool back = false;
    for (size_t i = 0; i < call->nlimits; i++)
        back = back || pt_call_delta(call, i) < 0;
    if (back && p->deny_cache != NULL)
        pt_deny_cache_forget_all(p->deny_cache); /* units come back */
}

porteiro_status pt_settle_prepare(porteiro_t *p, const porteiro_request *req,
                                  const porteiro_usage *u, const char *ns, pt_call *call) {
    if (u == NULL || req == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg), "settle: no request or usage given");
        return PORTEIRO_ERR_INVALID;
    }
    if (u->estimate < 0 || u->estimate > PORTEIRO_MAX_AMOUNT || u->used < 0 ||
        u->used > PORTEIRO_MAX_AMOUNT) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "settle: estimate and used must be between 0 and 1000000000 units (got %lld "
                 "and %lld)",
                 (long long)u->estimate, (long long)u->used);
        return PORTEIRO_ERR_INVALID;
    }
    if (u->age_ms < -1 || u->age_ms > PT_SETTLE_MAX_AGE_MS) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "settle: age_ms must be -1 (unknown) or between 0 and 732 days");
        return PORTEIRO_ERR_INVALID;
    }
    porteiro_request check = *req;
    check.cost = u->estimate;
    check.max_wait_ms = 0; /* a reservation's units were taken as any others */
    porteiro_status st = pt_prepare_in(p, &check, ns, call);
    if (st != PORTEIRO_OK)
        return st;
    for (size_t i = 0; i < call->nlimits; i++) {
        if (!pt_settle_supported(call->limits[i].algorithm)) {
            snprintf(p->errmsg, sizeof(p->errmsg),
                     "settle: a %s limit cannot be settled (docs/algorithms.md, \"Settling\")",
                     porteiro_algorithm_name(call->limits[i].algorithm));
            return PORTEIRO_ERR_UNSUPPORTED;
        }
    }
    call->delta = u->used - u->estimate;
    mark_settle(p, call, u->age_ms);
    return PORTEIRO_OK;
}

porteiro_status pt_settle_prepare_multi(porteiro_t *p, const porteiro_multi_request *req,
                                        const int64_t *estimates, int64_t age_ms, pt_call *call) {
    if (age_ms < -1 || age_ms > PT_SETTLE_MAX_AGE_MS) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "settle: age_ms must be -1 (unknown) or between 0 and 732 days");
        return PORTEIRO_ERR_INVALID;
    }
    porteiro_status st =
        pt_call_prepare_multi(call, p->prefix, p->prefix_len, req, p->errmsg, sizeof(p->errmsg));
    if (st != PORTEIRO_OK)
        return st;
    for (size_t i = 0; i < call->nlimits; i++) {
        int64_t e = estimates != NULL ? estimates[i] : 0;
        if (e < 0 || e > PORTEIRO_MAX_AMOUNT) {
            snprintf(p->errmsg, sizeof(p->errmsg),
                     "settle: item %zu: its estimate must be between 0 and 1000000000 units", i);
            return PORTEIRO_ERR_INVALID;
        }
    }
    /* Items that share a state (call.c, place_item) were checked as one
     * counter taking the largest of their costs: it settles once, by its
     * first item, from the largest estimate to the largest use (of the
     * items not in shadow, when one is not, as the check chose). */
    for (size_t i = 0; i < call->nlimits; i++) {
        call->deltas[i] = 0;
        if (call->alias[i] != i)
            continue;
        int64_t e = -1, shadow_e = 0;
        for (size_t j = 0; j < call->nlimits; j++) {
            if (call->alias[j] != i)
                continue;
            int64_t ej = estimates != NULL ? estimates[j] : 0;
            if (req->items[j].shadow)
                shadow_e = ej > shadow_e ? ej : shadow_e;
            else if (ej > e)
                e = ej;
        }
        call->deltas[i] = call->costs[i] - (e >= 0 ? e : shadow_e);
    }
    /* One item (not in shadow) is a single check of its item's key: its
     * cost is then the estimate, as a single settle's (pt_settle_prepare). */
    call->delta = call->deltas[0];
    if (!call->multi)
        call->cost = call->costs[0] - call->deltas[0];
    mark_settle(p, call, age_ms);
    return PORTEIRO_OK;
}

porteiro_status pt_settle_prepare_request(porteiro_t *p, const porteiro_request *req,
                                          const porteiro_usage *u, pt_call *call) {
    if (u == NULL || req == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg), "settle: no request or usage given");
        return PORTEIRO_ERR_INVALID;
    }
    int kind = pt_request_kind(p, req);
    if (kind < 0)
        return PORTEIRO_ERR_INVALID;
    porteiro_status st = PT_RESERVED_OK(p, req, "porteiro_request");
    if (st != PORTEIRO_OK)
        return st;
    if (kind == 2) {
        if (u->estimate != 0 || u->used != 0) {
            snprintf(p->errmsg, sizeof(p->errmsg),
                     "settle: a multi-key check settles its items' costs (what each used) "
                     "against usage.estimates: usage.estimate and .used must be 0");
            return PORTEIRO_ERR_INVALID;
        }
        if (u->estimates == NULL ? u->nestimates != 0 : u->nestimates != req->multi->nitems) {
            snprintf(p->errmsg, sizeof(p->errmsg),
                     "settle: usage.nestimates must be the number of items (%zu), or 0 with "
                     "estimates NULL (got %zu)",
                     req->multi->nitems, u->nestimates);
            return PORTEIRO_ERR_INVALID;
        }
        st = pt_settle_prepare_multi(p, req->multi, u->estimates, u->age_ms, call);
        if (st == PORTEIRO_OK)
            pt_top_tag_multi(p->top, call, req->multi); /* the units used: PORTEIRO_TOP_USED */
        return st;
    }
    if (u->estimates != NULL || u->nestimates != 0) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "settle: usage.estimates is for a multi-key check (porteiro_request.multi)");
        return PORTEIRO_ERR_INVALID;
    }
    if (kind == 0)
        return pt_settle_prepare(p, req, u, NULL, call);
    const porteiro_policy *policy = req->policy;
    if (policy->has_on_error && (unsigned)policy->on_error > PORTEIRO_ON_ERROR_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "policy: unknown on_error mode");
        return PORTEIRO_ERR_INVALID;
    }
    if ((st = PT_RESERVED_OK(p, policy, "porteiro_policy")) != PORTEIRO_OK)
        return st;
    porteiro_request in = {.limits = policy->limits,
                           .nlimits = policy->nlimits,
                           .key = req->key,
                           .key_len = req->key_len,
                           .cost = 0,
                           .now_ms = req->now_ms,
                           .max_wait_ms = 0};
    st = pt_settle_prepare(p, &in, u, policy->name, call);
    if (st == PORTEIRO_OK) {
        call->on_error = policy->has_on_error ? (int)policy->on_error : -1;
        pt_top_tag(p->top, call, 0, policy->name); /* the units used: PORTEIRO_TOP_USED */
    }
    return st;
}

porteiro_status porteiro_settle(porteiro_t *p, const porteiro_request *req,
                                const porteiro_usage *usage, porteiro_decision *decision) {
    pt_call call;
    if (p == NULL || decision == NULL)
        return PORTEIRO_ERR_INVALID;
    pt_lock_for_check(p);
    p->errmsg[0] = '\0';
    porteiro_status st = pt_settle_prepare_request(p, req, usage, &call);
    if (st == PORTEIRO_OK) {
        porteiro_status one;
        st = pt_decide(p, &call, 1, decision, &one);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}
