/* stats.c — counters kept per handle; exported as Prometheus text by the
 * daemon and shown by the CLI. */
#include <string.h>

#include "limiter/handle.h"
#include "limiter/global.h"
#include "redis/tls.h"

const int64_t porteiro_latency_bounds_us[PORTEIRO_LATENCY_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
};

void pt_stats_decision(porteiro_stats *s, porteiro_status st, const porteiro_decision *d) {
    if (st != PORTEIRO_OK || d == NULL)
        return;
    s->checks++;
    if (d->allowed)
        s->allowed++;
    else
        s->denied++;
    switch (d->fallback) {
        case PORTEIRO_FALLBACK_OPEN: s->fallback_open++; break;
        case PORTEIRO_FALLBACK_CLOSED: s->fallback_closed++; break;
        case PORTEIRO_FALLBACK_LOCAL: s->fallback_local++; break;
        case PORTEIRO_FALLBACK_NONE: break;
    }
}

void pt_stats_settle(porteiro_stats *s, porteiro_status st, const porteiro_decision *d) {
    if (st != PORTEIRO_OK || d == NULL)
        return;
    s->settles++;
    s->settle_debt_units += (uint64_t)(d->debt_added > 0 ? d->debt_added : 0);
}

void pt_stats_round_trip(porteiro_stats *s, int64_t latency_us, bool failed, bool timeout) {
    size_t b = 0;
    while (b < PORTEIRO_LATENCY_BUCKETS - 1 && latency_us > porteiro_latency_bounds_us[b])
        b++;
    s->latency[b]++;
    s->latency_sum_us += (uint64_t)(latency_us > 0 ? latency_us : 0);
    if (failed)
        s->redis_errors++;
    if (timeout)
        s->redis_timeouts++;
}

void porteiro_stats_get(porteiro_t *p, porteiro_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    out->breaker_state = (int)p->breaker.state;
    out->breaker_opened = p->breaker.opened;
    out->redis_connects = p->redis != NULL ? pt_router_connects(p->redis) : 0;
    out->redis_eviction_risk = p->redis != NULL ? pt_router_eviction_risk(p->redis) : -1;
    out->memory_evictions = pt_memory_evictions(p->memory);
    out->memory_keys = pt_memory_count(p->memory);
    out->global_held = pt_global_held(p);
    out->deny_cache_entries = p->deny_cache != NULL ? pt_deny_cache_count(p->deny_cache) : 0;
    if (p->tls != NULL)
        pt_tls_counts(p->tls, &out->tls_handshakes, &out->tls_failures);
    pthread_mutex_unlock(&p->mu);
}
