/* metrics.c — counting and the Prometheus text format. */
#include "metrics.h"

#include <stddef.h>
#include <string.h>

static pd_policy_counts *counts_of(pd_metrics *m, const char *policy) {
    for (size_t i = 0; i < m->npolicies; i++)
        if (strcmp(m->policies[i].policy, policy) == 0)
            return &m->policies[i];
    if (m->npolicies == PD_MAX_COUNTED_POLICIES || strlen(policy) >= sizeof(m->policies[0].policy))
        return NULL;
    pd_policy_counts *c = &m->policies[m->npolicies++];
    strcpy(c->policy, policy);
    return c;
}

void pd_metrics_count(pd_metrics *m, const char *policy, porteiro_status status,
                      const porteiro_decision *d) {
    pd_policy_counts *c = counts_of(m, policy);
    if (c == NULL) {
        m->other_policies++;
        return;
    }
    if (status != PORTEIRO_OK || d == NULL) {
        c->errors++;
        return;
    }
    if (d->shadow_denied)
        c->shadow_denied++;
    if (d->allowed)
        c->allowed++;
    else
        c->denied++;
    if (d->fallback != PORTEIRO_FALLBACK_NONE)
        c->fallback++;
    if (d->fallback != PORTEIRO_FALLBACK_NONE && (unsigned)d->fallback_reason < PD_STATUS_COUNT)
        m->fallback_reasons[d->fallback_reason]++;
}

void pd_metrics_count_settle(pd_metrics *m, const char *policy, porteiro_status status,
                             const porteiro_decision *d, int64_t delta) {
    pd_policy_counts *c = counts_of(m, policy);
    if (c == NULL) {
        m->other_policies++;
        return;
    }
    if (status != PORTEIRO_OK || d == NULL) {
        c->settle_errors++;
        return;
    }
    c->settles++;
    if (d->fallback != PORTEIRO_FALLBACK_NONE && (unsigned)d->fallback_reason < PD_STATUS_COUNT)
        m->fallback_reasons[d->fallback_reason]++;
    if (delta < 0)
        c->settle_returned += (uint64_t)-delta;
    else
        c->settle_charged += (uint64_t)delta;
    c->debt_units += (uint64_t)(d->debt_added > 0 ? d->debt_added : 0);
    c->settles_in_debt += d->debt > 0;
}

/* Policy names come from the config file; escape them as label values. */
void pd_metrics_label_value(struct evbuffer *out, const char *v) {
    for (; *v != '\0'; v++) {
        if (*v == '"' || *v == '\\')
            evbuffer_add(out, "\\", 1);
        if (*v == '\n')
            evbuffer_add(out, "\\n", 2);
        else
            evbuffer_add(out, v, 1);
    }
}

static void header(struct evbuffer *out, const char *name, const char *type, const char *help) {
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric of one value, no labels: its header and its line. */
static void metric(struct evbuffer *out, const char *name, const char *type, const char *help,
                   unsigned long long v) {
    header(out, name, type, help);
    evbuffer_add_printf(out, "%s %llu\n", name, v);
}

static const char *reason_label(int status) {
    switch (status) {
        case PORTEIRO_ERR_CONNECT: return "connect";
        case PORTEIRO_ERR_TIMEOUT: return "timeout";
        case PORTEIRO_ERR_REDIS: return "redis_error";
        case PORTEIRO_ERR_AUTH: return "auth";
        case PORTEIRO_ERR_PERMISSION: return "permission";
        case PORTEIRO_ERR_PROTOCOL: return "protocol";
        case PORTEIRO_ERR_CIRCUIT_OPEN: return "circuit_open";
        default: return NULL;
    }
}

static void write_decisions(struct evbuffer *out, const pd_metrics *m) {
    header(
        out, "porteiro_decisions_total", "counter",
        "Decisions answered, by policy and outcome (shadow_denied: allowed in shadow mode, would have been denied).");
    for (size_t i = 0; i < m->npolicies; i++) {
        const pd_policy_counts *c = &m->policies[i];
        static const char *const outcome[] = {"allowed", "denied", "error", "shadow_denied"};
        uint64_t v[] = {c->allowed, c->denied, c->errors, c->shadow_denied};
        for (int k = 0; k < 4; k++) {
            evbuffer_add_printf(out, "porteiro_decisions_total{policy=\"");
            pd_metrics_label_value(out, c->policy);
            evbuffer_add_printf(out, "\",outcome=\"%s\"} %llu\n", outcome[k],
                                (unsigned long long)v[k]);
        }
    }
}

/* A counter per policy (the policies that settled at least once). */
static void per_policy(struct evbuffer *out, const pd_metrics *m, const char *name,
                       const char *help, size_t field, const char *label) {
    bool any = false;
    for (size_t i = 0; i < m->npolicies; i++) {
        const pd_policy_counts *c = &m->policies[i];
        if (c->settles + c->settle_errors == 0)
            continue;
        if (!any && help != NULL) /* NULL: the second label of a series already begun */
            header(out, name, "counter", help);
        any = true;
        evbuffer_add_printf(out, "%s{policy=\"", name);
        pd_metrics_label_value(out, c->policy);
        evbuffer_add_printf(out, "\"%s} %llu\n", label,
                            (unsigned long long)*(const uint64_t *)((const char *)c + field));
    }
}

/* Settles (POST /v1/settle, issue 38), for the policies that have any. */
static void write_settles(struct evbuffer *out, const pd_metrics *m) {
    per_policy(out, m, "porteiro_settles_total",
               "Settles answered (the real cost of a check given back or charged), by policy "
               "and outcome.",
               offsetof(pd_policy_counts, settles), ",outcome=\"ok\"");
    for (size_t i = 0; i < m->npolicies; i++) {
        const pd_policy_counts *c = &m->policies[i];
        if (c->settles + c->settle_errors == 0)
            continue;
        evbuffer_add_printf(out, "porteiro_settles_total{policy=\"");
        pd_metrics_label_value(out, c->policy);
        evbuffer_add_printf(out, "\",outcome=\"error\"} %llu\n",
                            (unsigned long long)c->settle_errors);
    }
    per_policy(out, m, "porteiro_settle_units_total",
               "Units settles asked to give back (direction returned) or charged, by policy.",
               offsetof(pd_policy_counts, settle_returned), ",direction=\"returned\"");
    per_policy(out, m, "porteiro_settle_units_total", NULL,
               offsetof(pd_policy_counts, settle_charged), ",direction=\"charged\"");
    per_policy(out, m, "porteiro_debt_units_total",
               "Units settles charged past empty (debt: the next checks of that key wait it "
               "out), by policy.",
               offsetof(pd_policy_counts, debt_units), "");
    per_policy(out, m, "porteiro_settles_in_debt_total",
               "Settles that left their key in debt, by policy.",
               offsetof(pd_policy_counts, settles_in_debt), "");
}

static void write_fallbacks(struct evbuffer *out, const pd_metrics *m, const porteiro_stats *s) {
    header(out, "porteiro_fallbacks_total", "counter",
           "Decisions made without Redis, by the failure behind them.");
    for (int st = 0; st < PD_STATUS_COUNT; st++) {
        const char *reason = reason_label(st);
        if (reason != NULL)
            evbuffer_add_printf(out, "porteiro_fallbacks_total{reason=\"%s\"} %llu\n", reason,
                                (unsigned long long)m->fallback_reasons[st]);
    }
    header(out, "porteiro_fallback_decisions_total", "counter",
           "Decisions made without Redis, by on_error mode.");
    evbuffer_add_printf(out,
                        "porteiro_fallback_decisions_total{mode=\"open\"} %llu\n"
                        "porteiro_fallback_decisions_total{mode=\"closed\"} %llu\n"
                        "porteiro_fallback_decisions_total{mode=\"local\"} %llu\n",
                        (unsigned long long)s->fallback_open,
                        (unsigned long long)s->fallback_closed,
                        (unsigned long long)s->fallback_local);
}

static void write_redis(struct evbuffer *out, const porteiro_stats *s) {
    metric(out, "porteiro_redis_errors_total", "counter", "Failed Redis round trips, any cause.",
           s->redis_errors);
    metric(out, "porteiro_redis_timeouts_total", "counter",
           "Redis round trips over the time budget.", s->redis_timeouts);
    header(out, "porteiro_breaker_state", "gauge",
           "Circuit breaker: 0 closed, 1 open, 2 half-open.");
    evbuffer_add_printf(out, "porteiro_breaker_state %d\n", s->breaker_state);
    metric(out, "porteiro_breaker_opened_total", "counter", "Times the circuit breaker opened.",
           s->breaker_opened);
    metric(out, "porteiro_breaker_skips_total", "counter", "Checks not sent: the breaker was open.",
           s->breaker_skips);
    metric(out, "porteiro_deny_cache_hits_total", "counter",
           "Denials answered by the deny cache, without a Redis call.", s->deny_cache_hits);
    metric(out, "porteiro_memory_evictions_total", "counter",
           "Keys of the memory backend dropped, least recently used first, to make room.",
           s->memory_evictions);
    metric(out, "porteiro_deny_cache_entries", "gauge", "Denials the deny cache holds now.",
           s->deny_cache_entries);
    metric(out, "porteiro_memory_keys", "gauge",
           "Keys the memory backend (or the local fallback) holds now.", s->memory_keys);
    metric(out, "porteiro_tls_handshakes_total", "counter",
           "TLS handshakes with Redis completed (0 without TLS).", s->tls_handshakes);
    metric(out, "porteiro_tls_handshake_failures_total", "counter",
           "TLS handshakes with Redis that failed (an unknown CA, a name mismatch, a refused "
           "client certificate...).",
           s->tls_failures);
    /* The library's buckets are in us; Prometheus wants seconds, cumulative. */
    header(out, "porteiro_redis_latency_seconds", "histogram", "Redis round-trip time.");
    uint64_t cumulative = 0;
    for (int b = 0; b < PORTEIRO_LATENCY_BUCKETS - 1; b++) {
        cumulative += s->latency[b];
        int64_t us = porteiro_latency_bounds_us[b];
        evbuffer_add_printf(out, "porteiro_redis_latency_seconds_bucket{le=\"%lld.%06lld\"} %llu\n",
                            (long long)(us / 1000000), (long long)(us % 1000000),
                            (unsigned long long)cumulative);
    }
    cumulative += s->latency[PORTEIRO_LATENCY_BUCKETS - 1];
    evbuffer_add_printf(out, "porteiro_redis_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                        (unsigned long long)cumulative);
    evbuffer_add_printf(out, "porteiro_redis_latency_seconds_sum %llu.%06llu\n",
                        (unsigned long long)(s->latency_sum_us / 1000000),
                        (unsigned long long)(s->latency_sum_us % 1000000));
    evbuffer_add_printf(out, "porteiro_redis_latency_seconds_count %llu\n",
                        (unsigned long long)cumulative);
}

/* Quota leases (docs/quota_leasing.md): how many checks Redis did not see.
 * quota_local / (checks) is the share answered in memory; quota_units /
 * quota_grants the mean lease. */
static void write_quota(struct evbuffer *out, const porteiro_stats *s) {
    metric(out, "porteiro_quota_local_total", "counter",
           "Checks answered from a quota lease, with no Redis call.", s->quota_local);
    metric(out, "porteiro_quota_grants_total", "counter",
           "Quota leases Redis granted (one Redis call each).", s->quota_grants);
    metric(out, "porteiro_quota_units_total", "counter",
           "Units those leases took, the granting checks' own included.", s->quota_units);
    metric(out, "porteiro_quota_cold_total", "counter",
           "Checks with a quota lease on whose key was too cold for one (decided in Redis).",
           s->quota_cold);
    metric(out, "porteiro_quota_unacked_total", "counter",
           "Grants of a lease with replicas: N that N replicas did not acknowledge in time.",
           s->quota_unacked);
}

/* One limit across regions (docs/regions.md): this porteirod is one
 * region's; its pools' units, the blocks it took from home and gave back,
 * and its home round trips. */
static void write_global(struct evbuffer *out, const porteiro_stats *s) {
    metric(out, "porteiro_global_local_total", "counter",
           "Checks of a global limit answered from a lease of the regional pool, no Redis call.",
           s->global_local);
    metric(out, "porteiro_global_pool_takes_total", "counter",
           "Calls to the regional pool of a global limit (one per lease).", s->global_takes);
    metric(out, "porteiro_global_home_calls_total", "counter",
           "Round trips to a global limit's home Redis (blocks, lone checks, give-backs).",
           s->global_home_calls);
    metric(out, "porteiro_global_home_failures_total", "counter",
           "Of which failed (no answer in time, refused).", s->global_home_failures);
    metric(out, "porteiro_global_blocks_total", "counter",
           "Blocks taken from home and deposited in the regional pool.", s->global_blocks);
    metric(out, "porteiro_global_block_units_total", "counter", "Units of those blocks.",
           s->global_block_units);
    metric(out, "porteiro_global_returned_units_total", "counter",
           "Units given back to home (a closing worker drains the pools it refilled).",
           s->global_returned);
    metric(out, "porteiro_global_held_units", "gauge",
           "Units the regional pools held at the last takes, plus the workers' leases of them.",
           s->global_held);
}

/* Multi-key checks over several Redis Cluster slots (docs/cluster.md, "A
 * check over several slots"): a give-back that failed leaves its units
 * taken until they expire (an under-admission, never an over-admission). */
static void write_spread(struct evbuffer *out, const porteiro_stats *s) {
    metric(out, "porteiro_cross_slot_checks_total", "counter",
           "Multi-key checks decided over several Redis Cluster slots (one call per slot).",
           s->cross_slot_checks);
    metric(out, "porteiro_givebacks_total", "counter",
           "Give-backs sent: a slot took units while its check was not admitted.", s->givebacks);
    metric(out, "porteiro_giveback_failed_total", "counter",
           "Give-backs not delivered (no answer, a master gone): their units stay taken until "
           "they expire.",
           s->giveback_failed);
}

void pd_metrics_write_nodes(struct evbuffer *out, const porteiro_node *nodes, size_t n) {
    if (n == 0)
        return;
    header(out, "porteiro_redis_node_up", "gauge",
           "1 when the Redis node's circuit breaker is not open (per master on a cluster).");
    for (size_t i = 0; i < n; i++)
        evbuffer_add_printf(out, "porteiro_redis_node_up{node=\"%s\"} %d\n", nodes[i].name,
                            nodes[i].up ? 1 : 0);
    header(out, "porteiro_redis_node_breaker_state", "gauge",
           "The node's circuit breaker: 0 closed, 1 open, 2 half-open.");
    for (size_t i = 0; i < n; i++)
        evbuffer_add_printf(out, "porteiro_redis_node_breaker_state{node=\"%s\"} %d\n",
                            nodes[i].name, nodes[i].breaker_state);
    header(out, "porteiro_redis_node_module", "gauge",
           "1 when the node's checks run as the Redis module's commands (porteiro.so), 0 the "
           "Lua scripts.");
    for (size_t i = 0; i < n; i++)
        evbuffer_add_printf(out, "porteiro_redis_node_module{node=\"%s\"} %d\n", nodes[i].name,
                            nodes[i].module ? 1 : 0);
}

const int64_t pd_delay_bounds_ms[PD_DELAY_BUCKETS - 1] = {1,   2,   5,   10,   25,  50,
                                                          100, 250, 500, 1000, 2500};

void pd_metrics_count_delay(pd_metrics *m, bool abandoned, int64_t held_us) {
    pd_delay_counts *d = &m->delay;
    d->waiting--;
    if (abandoned) {
        d->abandoned++;
        return;
    }
    d->delayed++;
    d->held_sum_us += (uint64_t)(held_us > 0 ? held_us : 0);
    int b = 0;
    while (b < PD_DELAY_BUCKETS - 1 && held_us > pd_delay_bounds_ms[b] * 1000)
        b++;
    d->held[b]++;
}

/* Requests held instead of denied (policies with delay:). */
static void write_delay(struct evbuffer *out, const pd_delay_counts *d) {
    metric(out, "porteirod_delayed_total", "counter",
           "Requests held until their reservation's wait was over, then allowed.", d->delayed);
    header(out, "porteirod_delay_waiting", "gauge", "Requests held now.");
    evbuffer_add_printf(out, "porteirod_delay_waiting %lld\n", (long long)d->waiting);
    metric(out, "porteirod_delay_full_total", "counter",
           "Requests checked without a wait because max_waiting were held.", d->full);
    header(out, "porteirod_delay_abandoned_total", "counter",
           "Held requests whose client went away, and of them those refunded.");
    evbuffer_add_printf(out,
                        "porteirod_delay_abandoned_total %llu\n"
                        "porteirod_delay_refunded_total %llu\n",
                        (unsigned long long)d->abandoned, (unsigned long long)d->refunded);
    header(out, "porteirod_delay_seconds", "histogram", "How long allowed requests were held.");
    uint64_t cum = 0;
    for (int b = 0; b < PD_DELAY_BUCKETS; b++) {
        cum += d->held[b];
        if (b < PD_DELAY_BUCKETS - 1)
            evbuffer_add_printf(out, "porteirod_delay_seconds_bucket{le=\"%g\"} %llu\n",
                                (double)pd_delay_bounds_ms[b] / 1000.0, (unsigned long long)cum);
        else
            evbuffer_add_printf(out, "porteirod_delay_seconds_bucket{le=\"+Inf\"} %llu\n",
                                (unsigned long long)cum);
    }
    evbuffer_add_printf(out,
                        "porteirod_delay_seconds_sum %.6f\nporteirod_delay_seconds_count %llu\n",
                        (double)d->held_sum_us / 1e6, (unsigned long long)cum);
}

void pd_metrics_write(struct evbuffer *out, const pd_metrics *m, const porteiro_stats *s) {
    write_decisions(out, m);
    write_settles(out, m);
    write_fallbacks(out, m, s);
    write_redis(out, s);
    write_quota(out, s);
    write_spread(out, s);
    write_global(out, s);
    header(out, "porteirod_config_reloads_total", "counter", "SIGHUP reloads, by result.");
    evbuffer_add_printf(out,
                        "porteirod_config_reloads_total{result=\"ok\"} %llu\n"
                        "porteirod_config_reloads_total{result=\"failed\"} %llu\n",
                        (unsigned long long)m->reloads_ok, (unsigned long long)m->reloads_failed);
    metric(out, "porteirod_connections_refused_total", "counter",
           "Connections refused at the connection cap.", m->connections_refused);
    if (m->nworkers > 0) {
        header(out, "porteirod_worker_connections_total", "counter",
               "Connections each worker accepted (--workers N: worker 0 to N-1), by listener.");
        static const char *const names[PD_LISTENERS] = {"http", "grpc", "spoe"};
        for (int l = 0; l < PD_LISTENERS; l++) {
            if ((l == PD_LISTENER_GRPC && !m->grpc) || (l == PD_LISTENER_SPOE && !m->spoe))
                continue;
            for (size_t i = 0; i < m->nworkers && i < PD_METRICS_WORKERS; i++)
                evbuffer_add_printf(
                    out,
                    "porteirod_worker_connections_total{worker=\"%zu\",listener=\"%s\"} "
                    "%llu\n",
                    i, names[l], (unsigned long long)m->worker_connections[l][i]);
        }
    }
    write_delay(out, &m->delay);
}
