/* decide.h — the one decision path. Every check, blocking or on the event
 * loop, goes through the same steps; only the transport differs
 * (redis/conn.c blocking, redis/async_conn.c on a loop, memory/store.c):
 *
 *   pt_path_cached       is this a denial Redis gave that still holds?
 *   pt_path_gate         may Redis be called now? (the circuit breaker)
 *   pt_path_round_trip   how the call went: stats, the breaker, errmsg
 *   pt_path_answer       what the caller gets: the decision, or what
 *                        on_error makes of a failure; stats; shadow mode
 *
 * pt_decide runs them for blocking callers (porteiro_check*, refunds);
 * async.c runs them around redis/async_conn.c. Leases and resets use the
 * gate and the round trip (their answers are their own). All of these
 * need p->mu held. */
#ifndef PT_LIMITER_DECIDE_H
#define PT_LIMITER_DECIDE_H

#include "limiter/handle.h"

/* True when Redis may be called for n checks now; false (counted as n
 * breaker skips, reason in errmsg) while the breaker is open. */
bool pt_path_gate(porteiro_t *p, size_t n);
/* The same for one check on cluster master `node` (its own breaker; -1:
 * no master known, the router finds out). */
bool pt_path_node_gate(porteiro_t *p, int node);

/* One Redis round trip ended. latency_us < 0: nothing was sent. failed:
 * some check of it failed; node_failed: the node itself (no answer,
 * refusal), which alone moves the breaker; why goes to errmsg if set. */
void pt_path_round_trip(porteiro_t *p, int64_t latency_us, bool failed, bool timeout,
                        bool node_failed, const char *why);
/* Its stats and errmsg only: one more check of a failure the breaker has
 * counted already (pt_outcome.again). */
void pt_path_trip_stats(porteiro_t *p, int64_t latency_us, bool failed, bool timeout,
                        const char *why);
/* A cluster's round trip, per master: a master whose checks failed because
 * it did moves its own breaker (node_breakers); the others heal theirs. */
void pt_path_nodes_round_trip(porteiro_t *p, const int *nodes, const bool *node_failed, size_t n);

/* True, with the decision in *out, when the deny cache still holds a
 * denial of Redis's for this call: no Redis call is needed. The answer
 * then goes through pt_path_answer (asked_us -1) like any other. */
bool pt_path_cached(porteiro_t *p, const pt_call *call, porteiro_decision *out);

/* Turns the status of one call (and its decision when PORTEIRO_OK) into the
 * caller's answer in *out: a Redis failure becomes on_error's decision, a
 * denial Redis gave is remembered by the deny cache (asked_us: when Redis
 * was asked, monotonic us; -1 when it was not), the decision is counted,
 * then shadow mode lets a denial through. in may be out, or NULL for a
 * failure. Returns the status to report. */
porteiro_status pt_path_answer(porteiro_t *p, const pt_call *call, porteiro_status st,
                               const porteiro_decision *in, porteiro_decision *out,
                               int64_t asked_us);
/* The same, and *admitted: whether the check was admitted as an enforced
 * check would be (a decision, allowed, before shadow mode lets a denial
 * through): a multi-key check over several cluster slots gives its units
 * back when it was not (spread.h). */
porteiro_status pt_path_answer_admitted(porteiro_t *p, const pt_call *call, porteiro_status st,
                                        const porteiro_decision *in, porteiro_decision *out,
                                        int64_t asked_us, bool *admitted);

/* Decides n prepared calls with the handle's backend, blocking. The budget
 * counts from check_started_us: take mu with pt_lock_for_check (or zero that
 * field first). Returns the first failing status, or PORTEIRO_OK. */
porteiro_status pt_decide(porteiro_t *p, const pt_call *calls, size_t n,
                          porteiro_decision *decisions, porteiro_status *statuses);

/* The monotonic clock of budgets and latencies, us. */
int64_t pt_clock_us(void);

/* Takes p->mu for a check, noting when the check began: a caller queued
 * behind a slow one must not then wait its own full budget too. */
void pt_lock_for_check(porteiro_t *p);

/* The event loop's ordinary path for a prepared check (async.c): the deny
 * cache, the breaker, then one Redis call, as any check without a lease
 * takes; a quota lease's check that its lease cannot answer goes there
 * (limiter/quota.c). mu NOT held. PORTEIRO_OK: cb runs exactly once (maybe
 * before this returns); PORTEIRO_ERR_NOMEM: never. */
porteiro_status pt_async_ordinary(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                  void *privdata);

#endif
