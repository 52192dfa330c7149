/* shared.c — the state every worker shares (shared.h). */
#include "shared.h"

#include <stdlib.h>
#include <string.h>

pd_shared *pd_shared_new(pd_settings *settings, bool uses_redis) {
    pd_shared *sh = calloc(1, sizeof(*sh));
    if (sh == NULL)
        return NULL;
    sh->envoy_metrics = pd_envoy_metrics_new();
    if (sh->envoy_metrics == NULL) {
        free(sh);
        return NULL;
    }
    pthread_mutex_init(&sh->mu, NULL);
    sh->settings = settings;
    sh->uses_redis = uses_redis;
    return sh;
}

void pd_shared_free(pd_shared *sh) {
    if (sh == NULL)
        return;
    pd_settings_unref(sh->settings);
    pd_envoy_metrics_free(sh->envoy_metrics);
    pthread_mutex_destroy(&sh->mu);
    free(sh);
}

void pd_shared_set_settings(pd_shared *sh, pd_settings *settings) {
    pthread_mutex_lock(&sh->mu);
    pd_settings *old = sh->settings;
    sh->settings = settings;
    pthread_mutex_unlock(&sh->mu);
    pd_settings_unref(old);
}

pd_settings *pd_shared_settings(pd_shared *sh) {
    pthread_mutex_lock(&sh->mu);
    pd_settings *s = pd_settings_ref(sh->settings);
    pthread_mutex_unlock(&sh->mu);
    return s;
}

void pd_shared_count_reload(pd_shared *sh, bool ok) {
    pthread_mutex_lock(&sh->mu);
    if (ok)
        sh->metrics.reloads_ok++;
    else
        sh->metrics.reloads_failed++;
    pthread_mutex_unlock(&sh->mu);
}

int pd_shared_add_limiter(pd_shared *sh, porteiro_t *limiter) {
    pthread_mutex_lock(&sh->mu);
    int rc = -1;
    for (size_t i = 0; i < sh->nlimiters; i++)
        if (sh->limiters[i] == limiter)
            rc = 0; /* workers may share one (memory backend) */
    if (rc != 0 && sh->nlimiters < PD_MAX_WORKERS) {
        sh->limiters[sh->nlimiters++] = limiter;
        rc = 0;
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

void pd_shared_count_refused(pd_shared *sh) {
    pthread_mutex_lock(&sh->mu);
    sh->metrics.connections_refused++;
    pthread_mutex_unlock(&sh->mu);
}

/* Sums the counters of every worker's limiter; the breaker shown is the
 * worst one (open beats half-open beats closed). */
void pd_shared_total_stats(pd_shared *sh, porteiro_stats *sum) {
    memset(sum, 0, sizeof(*sum));
    pthread_mutex_lock(&sh->mu);
    for (size_t i = 0; i < sh->nlimiters; i++) {
        porteiro_stats s;
        porteiro_stats_get(sh->limiters[i], &s);
        sum->checks += s.checks;
        sum->allowed += s.allowed;
        sum->denied += s.denied;
        sum->fallback_open += s.fallback_open;
        sum->fallback_closed += s.fallback_closed;
        sum->fallback_local += s.fallback_local;
        sum->redis_errors += s.redis_errors;
        sum->redis_timeouts += s.redis_timeouts;
        sum->breaker_skips += s.breaker_skips;
        sum->breaker_opened += s.breaker_opened;
        sum->deny_cache_hits += s.deny_cache_hits;
        sum->memory_evictions += s.memory_evictions;
        sum->tls_handshakes += s.tls_handshakes;
        sum->tls_failures += s.tls_failures;
        sum->deny_cache_entries += s.deny_cache_entries;
        sum->memory_keys += s.memory_keys;
        if (s.breaker_state == 1 || (s.breaker_state == 2 && sum->breaker_state == 0))
            sum->breaker_state = s.breaker_state;
        for (int b = 0; b < PORTEIRO_LATENCY_BUCKETS; b++)
            sum->latency[b] += s.latency[b];
        sum->latency_sum_us += s.latency_sum_us;
    }
    pthread_mutex_unlock(&sh->mu);
}
