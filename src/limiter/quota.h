/* quota.h (limiter) — quota leases in the handle: the leases a handle
 * holds, a check answered from one with no Redis call, and the grant that
 * takes the next one (docs/quota_leasing.md; the arithmetic is
 * core/quota.c, the script src/lua/quota.lua). */
#ifndef PT_LIMITER_QUOTA_H
#define PT_LIMITER_QUOTA_H

#include "limiter/handle.h"

typedef struct pt_quota_table pt_quota_table;

void pt_quota_table_free(pt_quota_table *t);

/* Drops the units of every lease that names one of call's keys
 * (porteiro_reset: units counted before a reset must not be spent, nor
 * given back, after it); a grant on its way for such a lease lands with
 * its check's answer but leaves no units. */
void pt_quota_forget(pt_quota_table *t, const pt_call *call);

/* True when a lease may answer call: a Redis handle, the call's lease on,
 * a check (cost >= 1, no wait, no refund, one key) of leasable limits. */
bool pt_quota_applies(const porteiro_t *p, const pt_call *call);

/* Decides call, blocking, from its lease or by a grant (one Redis call),
 * through pt_path_answer like any check: true, with its status in *st.
 * False when its key is too cold for a lease (a grant is a call of its own
 * where a cold key's check shares a batch's): the caller decides it as
 * without leases. Caller holds p->mu; asked_us: when the check was called. */
bool pt_quota_decide(porteiro_t *p, const pt_call *call, porteiro_decision *out, int64_t asked_us,
                     porteiro_status *st);

/* The event-loop form (p->aconn attached, mu NOT held): PORTEIRO_OK when
 * the lease machinery took the check (cb runs exactly once, maybe before
 * this returns); PORTEIRO_ERR_UNSUPPORTED when the check should take the
 * ordinary path instead (its key too cold for a lease, the deny cache to
 * answer it, no memory). */
porteiro_status pt_quota_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                               void *privdata);

/* A handle that closes: each lease's unused units go back in one call each
 * (the script keeps what is exact: a window's, in its grant's window),
 * within one command timeout in all; the rest is lost as an instance that
 * dies loses it. Blocking; after the loop's grants have ended. */
void pt_quota_give_back_all(porteiro_t *p);

#endif
