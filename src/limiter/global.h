/* global.h — one limit across regions (docs/regions.md): a policy with a
 * home Redis. The global count lives at home (the quota grant of
 * src/lua/quota.lua, unchanged); blocks of it sit in a pool in the
 * handle's own (regional) Redis (src/lua/pool.lua); the handle leases from
 * that pool as quota leases lease from Redis, and spends in memory. Never
 * a unit home did not count. Blocking checks only (porteiro_check_policy). */
#ifndef PT_LIMITER_GLOBAL_H
#define PT_LIMITER_GLOBAL_H

#include "limiter/handle.h"

typedef struct pt_global_table pt_global_table;

/* A policy's global: into call (defaults applied), or PORTEIRO_ERR_INVALID
 * with the reason in errmsg. Nothing when the policy names no home. */
porteiro_status pt_global_prepare(porteiro_t *p, const porteiro_policy *policy, pt_call *call);

/* True when call names a home (a policy's global:) and can be decided by
 * it: a Redis handle, a check of cost >= 1, no wait, no refund, leasable
 * limits, Redis's clock. */
bool pt_global_applies(const porteiro_t *p, const pt_call *call);

/* Decides call from the instance's lease, the regional pool or home,
 * through pt_path_answer like any check. Caller holds p->mu. */
porteiro_status pt_global_decide(porteiro_t *p, const pt_call *call, porteiro_decision *out,
                                 int64_t asked_us);

/* The event-loop form (p->aconn attached: one regional node; mu NOT held):
 * PORTEIRO_OK when cb will run exactly once (maybe before this returns);
 * else nothing was done (no memory) and cb never runs. The pool take is a
 * command on the handle's loop connection, home's calls on a connection of
 * home's own on the same loop. */
porteiro_status pt_global_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                void *privdata);

/* Before the loop's connections go: home's loop connections close (their
 * calls in flight are answered, as failures). */
void pt_global_async_free(porteiro_t *p);

/* A handle that closes: the pools this handle refilled give their unused
 * units of the current window back to home (drain, then give-back), within
 * one home timeout in all; then the homes' connections go. */
void pt_global_free(porteiro_t *p);

/* The gauge porteiro_stats.global_held. Caller holds p->mu. */
uint64_t pt_global_held(const porteiro_t *p);

#endif
