/* shared.c — the state every worker shares (shared.h). */
#include "shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    sh->loaded_at_ms = wall_ms();
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
    sh->loaded_at_ms = wall_ms();
    sh->last_error[0] = '\0';
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

_Static_assert(PD_METRICS_WORKERS >= PD_MAX_WORKERS, "a counter for every worker");

void pd_shared_set_workers(pd_shared *sh, size_t n, bool grpc, bool spoe) {
    pthread_mutex_lock(&sh->mu);
    sh->metrics.nworkers = n < PD_METRICS_WORKERS ? n : PD_METRICS_WORKERS;
    sh->metrics.grpc = grpc;
    sh->metrics.spoe = spoe;
    pthread_mutex_unlock(&sh->mu);
}

void pd_shared_count_accepted(pd_shared *sh, int worker, pd_listener listener) {
    if (worker < 0 || worker >= PD_METRICS_WORKERS || (unsigned)listener >= PD_LISTENERS)
        return;
    pthread_mutex_lock(&sh->mu);
    sh->metrics.worker_connections[listener][worker]++;
    pthread_mutex_unlock(&sh->mu);
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
        sum->quota_local += s.quota_local;
        sum->quota_grants += s.quota_grants;
        sum->quota_units += s.quota_units;
        sum->quota_cold += s.quota_cold;
        sum->quota_unacked += s.quota_unacked;
        sum->cross_slot_checks += s.cross_slot_checks;
        sum->givebacks += s.givebacks;
        sum->giveback_failed += s.giveback_failed;
        sum->global_local += s.global_local;
        sum->global_takes += s.global_takes;
        sum->global_home_calls += s.global_home_calls;
        sum->global_home_failures += s.global_home_failures;
        sum->global_blocks += s.global_blocks;
        sum->global_block_units += s.global_block_units;
        sum->global_returned += s.global_returned;
        sum->global_held += s.global_held;
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

size_t pd_shared_limiters(pd_shared *sh, porteiro_t **out, size_t max) {
    pthread_mutex_lock(&sh->mu);
    size_t n = sh->nlimiters < max ? sh->nlimiters : max;
    memcpy(out, sh->limiters, n * sizeof(*out));
    pthread_mutex_unlock(&sh->mu);
    return n;
}

void pd_shared_snapshot(pd_shared *sh, pd_metrics *metrics, porteiro_stats *total) {
    pd_shared_total_stats(sh, total);
    pthread_mutex_lock(&sh->mu);
    *metrics = sh->metrics;
    pthread_mutex_unlock(&sh->mu);
}

void pd_shared_reload_info(pd_shared *sh, pd_reload_info *out) {
    pthread_mutex_lock(&sh->mu);
    out->loaded_at_ms = sh->loaded_at_ms;
    out->reloads_ok = sh->metrics.reloads_ok;
    out->reloads_failed = sh->metrics.reloads_failed;
    snprintf(out->last_error, sizeof(out->last_error), "%s", sh->last_error);
    pthread_mutex_unlock(&sh->mu);
}

void pd_shared_reload_error(pd_shared *sh, const char *err) {
    pthread_mutex_lock(&sh->mu);
    snprintf(sh->last_error, sizeof(sh->last_error), "%s", err);
    pthread_mutex_unlock(&sh->mu);
}
