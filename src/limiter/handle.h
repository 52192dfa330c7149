/* handle.h — the inside of porteiro_t, shared by the files that implement
 * the public API (porteiro.c, decide.c, async.c, ...). */
#ifndef PT_HANDLE_H
#define PT_HANDLE_H

#include <pthread.h>
#include <stdatomic.h>

#include "memory/store.h"
#include "topology/router.h"
#include "core/call.h"
#include "limiter/deny_cache.h"
#include "limiter/failover.h"

struct pt_aconn;    /* redis/async_conn.h */
struct pt_tls;      /* redis/tls.h */
struct pt_acluster; /* topology/acluster.h */
#include "redis/loop.h"

#define PT_DEFAULT_BATCH_MAX 64 /* checks per script call (docs/algorithms.md) */
#define PT_MAX_WAITERS 32       /* queued callers whose deadlines are honoured */

struct porteiro {
    pthread_mutex_t mu;    /* serialises the synchronous calls */
    porteiro_options opts; /* defaults applied; redis_url not kept */
    char prefix[PT_MAX_PREFIX + 1];
    size_t prefix_len;
    pt_memory *memory;  /* the backend without Redis; the local fallback with it */
    pt_router *redis;   /* NULL: memory backend */
    struct pt_tls *tls; /* NULL: plain; else every connection's TLS (freed last) */
    pt_breaker breaker; /* one node; unused on a cluster */
    /* A cluster: one breaker per master (router.h indexes), so a dead master
     * sends only its own slots to on_error. */
    pt_breaker node_breakers[PT_CLUSTER_MAX_NODES];
    bool cluster_suspect;           /* the last call held checks back on an open breaker */
    pt_deny_cache *deny_cache;      /* NULL: off (and always without Redis) */
    struct pt_topset *top;          /* NULL: off (opts.top_keys 0); limiter/top.h */
    struct pt_quota_table *quota;   /* quota leases held (limiter/quota.c); NULL: none yet */
    struct pt_global_table *global; /* global limits' leases and homes
                                       (limiter/global.c); NULL: none yet */
    pt_loop loop;                   /* the caller's (ops NULL until porteiro_attach_loop);
                                       aconn and acluster point here */
    struct pt_aconn *aconn;         /* NULL until porteiro_attach_loop */
    struct pt_acluster *acluster;   /* a cluster's async router: NULL until attached */
    bool async_closing;             /* porteiro_free under way: no new async checks */
    porteiro_stats stats;           /* guarded by mu (sync) or the loop thread */
    char errmsg[256];
    int64_t check_started_us; /* when the check holding mu was called (0: not
                                 known): time queued on mu is budget spent */
    /* When each caller blocked on mu was called (0 = free slot): the holder
     * stops waiting on Redis when the oldest of them runs out of budget, so
     * nobody waits past its own deadline, however the mutex hands over. */
    _Atomic int64_t waiting_since_us[PT_MAX_WAITERS];
};

/* Validates req into call under the handle's prefix (message in errmsg). */
porteiro_status pt_prepare(porteiro_t *p, const porteiro_request *req, pt_call *call);
/* pt_prepare for a policy's check (its name: its own keys, core/call.h's
 * pt_call_prepare_in). */
porteiro_status pt_prepare_in(porteiro_t *p, const porteiro_request *req, const char *ns,
                              pt_call *call);

/* Fills d with the decision of on_error mode for a failed call (OPEN or
 * CLOSED or LOCAL); returns the status to report (the failure for ERROR). */
porteiro_status pt_fallback(porteiro_t *p, const pt_call *call, porteiro_status failure,
                            porteiro_decision *d);

void pt_async_free(porteiro_t *p);

/* The checks porteiro_check_request (and _many) dispatches beside the
 * plain one: a policy's (policy_api.c), a multi-key one. */
porteiro_status pt_check_policy(porteiro_t *p, const porteiro_policy *policy, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, int64_t max_wait_ms,
                                porteiro_decision *decision);
porteiro_status pt_check_multi(porteiro_t *p, const porteiro_multi_request *req,
                               porteiro_decision *decision);
/* PORTEIRO_OK when the n words of a struct's reserved tail are zero; else
 * PORTEIRO_ERR_UNSUPPORTED (a field of a later header this library does
 * not know), naming the struct in errmsg. */
porteiro_status pt_reserved_ok(porteiro_t *p, const void *const *reserved, size_t n,
                               const char *what);
#define PT_RESERVED_OK(p, s, what)                                                                 \
    pt_reserved_ok((p), (s)->reserved, sizeof((s)->reserved) / sizeof((s)->reserved[0]), (what))

/* Which kind of check req is: 0 plain (limits), 1 a policy's, 2 multi-key;
 * -1 when it names more than one (the message in errmsg). */
int pt_request_kind(porteiro_t *p, const porteiro_request *req);

/* porteiro_refund's request (limits, or a policy's: its counters) into a
 * call; a multi-key one is PORTEIRO_ERR_UNSUPPORTED. Needs p->mu held. */
porteiro_status pt_refund_prepare(porteiro_t *p, const porteiro_request *req, pt_call *call);

/* Copies the caller's options (NULL: the defaults) into out, reading only
 * the in->struct_size bytes it has (include/porteiro.h, porteiro_options).
 * NULL, or the reason it cannot with *st. */
const char *pt_options_copy(porteiro_options *out, const porteiro_options *in, porteiro_status *st);

/* Counts a decision (or a Redis round trip of latency_us, when >= 0). */
void pt_stats_decision(porteiro_stats *s, porteiro_status st, const porteiro_decision *d);
void pt_stats_round_trip(porteiro_stats *s, int64_t latency_us, bool failed, bool timeout);
/* Counts a settle's decision (not as a check). */
void pt_stats_settle(porteiro_stats *s, porteiro_status st, const porteiro_decision *d);

#endif
