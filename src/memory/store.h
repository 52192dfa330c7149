/* store.h — in-process state with expiry: the embedded default and
 * the local fallback when Redis fails. Thread-safe (one mutex per store). */
#ifndef PT_BACKEND_MEMORY_H
#define PT_BACKEND_MEMORY_H

#include "core/call.h"
#include "core/leases.h"

typedef struct pt_memory pt_memory;

/* max_keys (>= PORTEIRO_MAX_LIMITS) bounds the keys held. When it is
 * reached, a new key takes the place of the least recently used one (an
 * eviction: that client starts afresh), never an error for a new client. */
pt_memory *pt_memory_new(size_t max_keys);
void pt_memory_free(pt_memory *m);

/* The process clock, ms since the epoch: wall time read once at creation,
 * advanced by the monotonic clock, so it never goes backwards. */
int64_t pt_memory_now(const pt_memory *m);

/* Decides call (all-or-nothing), with L divided by divisor (>= 1); when
 * call->refund is set, gives call->cost back in every limit instead. */
porteiro_status pt_memory_check(pt_memory *m, const pt_call *call, int divisor,
                                porteiro_decision *d);
/* One lease operation on the memory backend's leases (leases.h). */
porteiro_status pt_memory_lease(pt_memory *m, const pt_lease_op *op, pt_lease_out *out);
void pt_memory_reset(pt_memory *m, const pt_call *call);
size_t pt_memory_count(pt_memory *m);
/* Live keys evicted to make room since pt_memory_new. */
uint64_t pt_memory_evictions(pt_memory *m);

#endif
