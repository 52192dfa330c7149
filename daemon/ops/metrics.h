/* metrics.h — counters the daemon keeps per policy (the library counts per
 * handle), and the Prometheus text of both. No per-key labels, ever: the
 * number of series is bounded by the number of policies. */
#ifndef PD_METRICS_H
#define PD_METRICS_H

#include <event2/buffer.h>
#include <stdbool.h>

#include "porteiro.h"

#define PD_MAX_COUNTED_POLICIES 256
#define PD_METRICS_WORKERS 64 /* porteirod's workers at most (PD_MAX_WORKERS) */
#define PD_STATUS_COUNT 16    /* porteiro_status values counted by reason */

typedef struct pd_policy_counts {
    char policy[129];
    uint64_t allowed, denied, errors;
    uint64_t shadow_denied; /* allowed by shadow mode, would have been denied */
    uint64_t fallback;      /* decided by on_error, not Redis (in allowed/denied too) */
    /* POST /v1/settle (issue 38) */
    uint64_t settles, settle_errors;
    uint64_t settle_returned, settle_charged; /* units asked back / charged */
    uint64_t debt_units;                      /* units charged past empty (debt_added) */
    uint64_t settles_in_debt;                 /* settles that left the key in debt */
} pd_policy_counts;

/* Requests held by a policy's delay: (all policies together). Bounds of
 * the histogram of the time held, ms; the last bucket counts the rest. */
#define PD_DELAY_BUCKETS 12
extern const int64_t pd_delay_bounds_ms[PD_DELAY_BUCKETS - 1];
typedef struct pd_delay_counts {
    uint64_t delayed;   /* held, then answered as allowed */
    uint64_t full;      /* checked without a wait: max_waiting were held */
    uint64_t abandoned; /* their client went away while held */
    uint64_t refunded;  /* ... and their units were given back */
    int64_t waiting;    /* held now */
    uint64_t held[PD_DELAY_BUCKETS];
    uint64_t held_sum_us;
} pd_delay_counts;

/* porteirod's decision listeners, as porteirod_worker_connections_total's
 * listener label names them. */
typedef enum pd_listener {
    PD_LISTENER_HTTP = 0,
    PD_LISTENER_GRPC = 1,
    PD_LISTENER_SPOE = 2,
    PD_LISTENERS
} pd_listener;

typedef struct pd_metrics {
    pd_policy_counts policies[PD_MAX_COUNTED_POLICIES];
    size_t npolicies;
    uint64_t other_policies;                    /* beyond the table: counted, unlabelled */
    uint64_t fallback_reasons[PD_STATUS_COUNT]; /* by porteiro_status */
    uint64_t reloads_ok, reloads_failed;
    uint64_t connections_refused;
    /* Connections each worker accepted on its HTTP, gRPC and SPOE
     * listeners (pd_listener), for the workers porteirod started
     * (nworkers; 0: none shown). */
    uint64_t worker_connections[PD_LISTENERS][PD_METRICS_WORKERS];
    size_t nworkers;
    bool grpc; /* a gRPC listener: its series too */
    bool spoe; /* a SPOE listener: its series too */
    pd_delay_counts delay;
} pd_metrics;

/* Counts one answer (decision NULL when status is an error). */
void pd_metrics_count(pd_metrics *m, const char *policy, porteiro_status status,
                      const porteiro_decision *d);
/* Counts one settle: delta = used - estimate (decision NULL on error). */
void pd_metrics_count_settle(pd_metrics *m, const char *policy, porteiro_status status,
                             const porteiro_decision *d, int64_t delta);
/* Counts a held request released after held_us (abandoned: its client
 * went away). */
void pd_metrics_count_delay(pd_metrics *m, bool abandoned, int64_t held_us);
/* Appends the Prometheus text exposition (format 0.0.4). */
void pd_metrics_write(struct evbuffer *out, const pd_metrics *m, const porteiro_stats *s);
/* Writes v escaped as a Prometheus label value (", \ and newline). */
void pd_metrics_label_value(struct evbuffer *out, const char *v);
/* Per-node series (label node="host:port"; never a client key). */
void pd_metrics_write_nodes(struct evbuffer *out, const porteiro_node *nodes, size_t n);

#endif
