/* shared.h — what every worker of one porteirod shares: the current settings
 * (swapped on reload), the daemon's counters, envoy ratelimit's per-rule
 * counters, and every worker's limiter (for /metrics totals). */
#ifndef PD_SHARED_H
#define PD_SHARED_H

#include <pthread.h>
#include <stdbool.h>

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
/* Registers a worker's limiter, for /metrics. Returns 0, or -1 when full. */
int pd_shared_add_limiter(pd_shared *shared, porteiro_t *limiter);
/* The counters of every registered limiter, added up. */
void pd_shared_total_stats(pd_shared *shared, porteiro_stats *sum);

#endif
