/* quota.h (limiter) — quota leases in the handle: the leases a handle
 * holds, a check answered from one with no Redis call, and the grant that
 * takes the next one (docs/quota_leasing.md; the arithmetic is
 * core/quota.c, the script src/lua/quota.lua). */
#ifndef PT_LIMITER_QUOTA_H
#define PT_LIMITER_QUOTA_H

#include "limiter/handle.h"

typedef struct pt_quota_table pt_quota_table;

void pt_quota_table_free(pt_quota_table *t);

/* Drops every lease's units (porteiro_reset: units counted before a reset
 * must not be spent after it). A grant on its way still lands. */
void pt_quota_forget_all(pt_quota_table *t);

/* True when a lease may answer call: a Redis handle, the call's lease on,
 * a check (cost >= 1, no wait, no refund, one key) of leasable limits. */
bool pt_quota_applies(const porteiro_t *p, const pt_call *call);

/* After pt_quota_applies, caller holding p->mu: true when call goes by its
 * key's lease (units to spend or give back, a grant on its way, or a key
 * hot enough that its next lease would hold PT_QUOTA_MIN_LEASE checks);
 * false for a cold key, whose check takes the ordinary path (a batch's
 * share of a call costs Redis less than a grant of its own) and is counted
 * toward the key's rate. */
bool pt_quota_take(porteiro_t *p, const pt_call *call);

/* Decides call, blocking, from its lease or by a grant (one Redis call),
 * through pt_path_answer like any check. Caller holds p->mu; asked_us:
 * when the check was called. */
porteiro_status pt_quota_decide(porteiro_t *p, const pt_call *call, porteiro_decision *out,
                                int64_t asked_us);

/* The event-loop form (p->aconn attached, mu NOT held): PORTEIRO_OK when
 * the lease machinery took the check (cb runs exactly once, maybe before
 * this returns); PORTEIRO_ERR_UNSUPPORTED when the check should take the
 * ordinary path instead (a grant for its key already in flight, the deny
 * cache or the breaker to answer it, no memory). */
porteiro_status pt_quota_async(porteiro_t *p, const pt_call *call, porteiro_callback *cb,
                               void *privdata);

/* A handle that closes: each lease's unused units go back in one call each
 * (the script keeps what is exact: a window's, in its grant's window),
 * within one command timeout in all; the rest is lost as an instance that
 * dies loses it. Blocking; after the loop's grants have ended. */
void pt_quota_give_back_all(porteiro_t *p);

#endif
