/* shared.h — what every worker of one porteirod shares: the current settings
 * (swapped on reload), the daemon's counters, envoy ratelimit's per-rule
 * counters, and every worker's limiter (for /metrics totals). */
#ifndef PD_SHARED_H
#define PD_SHARED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "envoy_metrics.h"
#include "metrics.h"
#include "porteiro.h"
#include "settings.h"

#define PD_MAX_WORKERS 64

typedef struct pd_shared {
    pthread_mutex_t mu; /* guards everything below but envoy_metrics */
    pd_settings *settings;
    bool uses_redis;
    pd_metrics metrics;
    porteiro_t *limiters[PD_MAX_WORKERS];
    size_t nlimiters;
    pd_envoy_metrics *envoy_metrics; /* its own lock */
    int64_t loaded_at_ms;            /* wall clock: the running settings were loaded */
    char last_error[512];            /* the last reload's failure; "" after a good one */
} pd_shared;

/* Takes the settings' reference. NULL on ENOMEM. */
pd_shared *pd_shared_new(pd_settings *settings, bool uses_redis);
void pd_shared_free(pd_shared *shared);
/* Swaps in new settings (taking their reference); requests in flight
 * finish with the ones they started with. */
void pd_shared_set_settings(pd_shared *shared, pd_settings *settings);
/* A new reference to the current settings. */
pd_settings *pd_shared_settings(pd_shared *shared);
void pd_shared_count_reload(pd_shared *shared, bool ok);
/* A connection refused at the cap (either server). */
void pd_shared_count_refused(pd_shared *shared);
/* How many workers porteirod runs and whether they listen for gRPC and
 * SPOE (the porteirod_worker_connections_total series), and a connection
 * worker (0 to n-1) accepted on one of its listeners. */
void pd_shared_set_workers(pd_shared *shared, size_t n, bool grpc, bool spoe);
void pd_shared_count_accepted(pd_shared *shared, int worker, pd_listener listener);
/* Registers a worker's limiter, for /metrics. Returns 0, or -1 when full. */
int pd_shared_add_limiter(pd_shared *shared, porteiro_t *limiter);
/* The counters of every registered limiter, added up. */
void pd_shared_total_stats(pd_shared *shared, porteiro_stats *sum);

/* For the admin listener (admin/admin.c). The registered limiters (at most
 * max into out; returns how many). */
size_t pd_shared_limiters(pd_shared *shared, porteiro_t **out, size_t max);
/* A copy of the daemon's counters and the limiters' totals. */
void pd_shared_snapshot(pd_shared *shared, pd_metrics *metrics, porteiro_stats *total);
typedef struct pd_reload_info {
    int64_t loaded_at_ms;
    uint64_t reloads_ok, reloads_failed;
    char last_error[512];
} pd_reload_info;
void pd_shared_reload_info(pd_shared *shared, pd_reload_info *out);
/* A reload failed with err (main.c); the next good one clears it. */
void pd_shared_reload_error(pd_shared *shared, const char *err);

#endif
