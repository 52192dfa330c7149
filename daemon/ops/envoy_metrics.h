/* envoy_metrics.h — envoy ratelimit's per-rule counters (total_hits,
 * over_limit, near_limit, within_limit, shadow_mode) as Prometheus series
 * labelled by the rule's configured path ("domain.key_value.key"), or, for
 * detailed_metric / value_to_metric rules, by the path with the request's
 * values. The table is bounded: beyond it, hits are counted unlabelled.
 * Thread-safe (workers share it). */
#ifndef PD_ENVOY_METRICS_H
#define PD_ENVOY_METRICS_H

#include <event2/buffer.h>
#include <stdint.h>

#define PD_ENVOY_MAX_SERIES 4096
#define PD_ENVOY_MAX_NAME 512

typedef struct pd_envoy_counts {
    uint64_t total_hits, over_limit, near_limit, within_limit, shadow_mode;
} pd_envoy_counts;

typedef struct pd_envoy_metrics pd_envoy_metrics;

pd_envoy_metrics *pd_envoy_metrics_new(void);
void pd_envoy_metrics_free(pd_envoy_metrics *m);
/* Adds c to the series of name (len bytes). */
void pd_envoy_metrics_add(pd_envoy_metrics *m, const char *name, size_t len,
                          const pd_envoy_counts *c);
/* Reads one series (zeros when absent); for tests. */
void pd_envoy_metrics_get(pd_envoy_metrics *m, const char *name, pd_envoy_counts *out);
void pd_envoy_metrics_write(struct evbuffer *out, pd_envoy_metrics *m);

#endif
