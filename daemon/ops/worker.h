/* worker.h — what the faces of one worker share (the HTTP API in app/, the
 * envoy face in envoy/, the gRPC server in grpc/, the SPOE agent in spoe/):
 * the worker's limiter, the
 * process's shared state, its requests in flight and the clock its checks
 * use. Used on the worker's loop thread only; the fields are read directly. */
#ifndef PD_WORKER_H
#define PD_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "porteiro.h"
#include "shared.h"
#include "spare.h"

typedef struct pd_worker {
    pd_shared *shared;
    porteiro_t *limiter; /* borrowed */
    size_t in_flight;    /* requests waiting for the limiter, every face */
    int64_t clock_ms;    /* PORTEIRO_NOW, or a test's injected clock */
    pd_spare rls_jobs;   /* the envoy face's finished jobs (envoy_rls.c) */
    int index;           /* which worker, 0 to N-1 (main.c); -1: the admin listener's */
} pd_worker;

/* Registers the limiter with shared (for /metrics). Returns 0, or -1 when
 * the shared table is full. */
int pd_worker_init(pd_worker *w, pd_shared *shared, porteiro_t *limiter);
/* Frees what the worker keeps (its spare jobs); not the limiter. */
void pd_worker_release(pd_worker *w);
void pd_worker_in_flight_add(pd_worker *w, int delta);
/* A connection refused at the cap (pd_shared_count_refused). */
void pd_worker_count_refused(pd_worker *w);
/* A connection this worker accepted on one of its listeners
 * (pd_shared_count_accepted). */
void pd_worker_count_accepted(pd_worker *w, pd_listener listener);
/* Counts one answer of a named policy in /metrics (porteiro_requests_total
 * and the fallback reasons; d NULL when st is an error). */
void pd_worker_count_decision(pd_worker *w, const char *policy, porteiro_status st,
                              const porteiro_decision *d);

#endif
