/* envoy_metrics.c — envoy ratelimit's per-rule counters (envoy_metrics.h):
 * an open-addressing table of at most PD_ENVOY_MAX_SERIES names. */
#include "envoy_metrics.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "porteiro.h"

#define SLOTS (PD_ENVOY_MAX_SERIES * 2) /* half full at most */

typedef struct series {
    char *name; /* NULL: free slot */
    pd_envoy_counts c;
} series;

struct pd_envoy_metrics {
    pthread_mutex_t mu;
    size_t count;
    pd_envoy_counts other; /* beyond the table */
    series slots[SLOTS];
};

pd_envoy_metrics *pd_envoy_metrics_new(void) {
    pd_envoy_metrics *m = calloc(1, sizeof(*m));
    if (m != NULL)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void pd_envoy_metrics_free(pd_envoy_metrics *m) {
    if (m == NULL)
        return;
    for (size_t i = 0; i < SLOTS; i++)
        free(m->slots[i].name);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The slot of name, made if absent and there is room; NULL otherwise.
 * Caller holds mu. */
static series *find(pd_envoy_metrics *m, const char *name, size_t len, bool make) {
    /* Keyed (the library's SipHash under the process's key): a name holds
     * a client's values (value_to_metric), and names that all start at one
     * slot would make every lookup a long probe. */
    for (size_t i = porteiro_keyed_hash(name, len) % SLOTS;; i = (i + 1) % SLOTS) {
        series *s = &m->slots[i];
        if (s->name == NULL) {
            if (!make || m->count >= PD_ENVOY_MAX_SERIES || len > PD_ENVOY_MAX_NAME)
                return NULL;
            s->name = malloc(len + 1);
            if (s->name == NULL)
                return NULL;
            memcpy(s->name, name, len);
            s->name[len] = '\0';
            m->count++;
            return s;
        }
        if (strlen(s->name) == len && memcmp(s->name, name, len) == 0)
            return s;
    }
}

void pd_envoy_metrics_add(pd_envoy_metrics *m, const char *name, size_t len,
                          const pd_envoy_counts *c) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, name, len, true);
    pd_envoy_counts *to = s != NULL ? &s->c : &m->other;
    to->total_hits += c->total_hits;
    to->over_limit += c->over_limit;
    to->near_limit += c->near_limit;
    to->within_limit += c->within_limit;
    to->shadow_mode += c->shadow_mode;
    pthread_mutex_unlock(&m->mu);
}

void pd_envoy_metrics_get(pd_envoy_metrics *m, const char *name, pd_envoy_counts *out) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, name, strlen(name), false);
    *out = s != NULL ? s->c : (pd_envoy_counts){0};
    pthread_mutex_unlock(&m->mu);
}

static const struct {
    const char *name, *help;
    size_t offset;
} kinds[] = {
    {"total_hits", "hits asked for", offsetof(pd_envoy_counts, total_hits)},
    {"over_limit", "hits over the limit", offsetof(pd_envoy_counts, over_limit)},
    {"near_limit", "hits allowed above near_limit_ratio of the limit",
     offsetof(pd_envoy_counts, near_limit)},
    {"within_limit", "hits allowed", offsetof(pd_envoy_counts, within_limit)},
    {"shadow_mode", "hits over the limit let through by shadow mode",
     offsetof(pd_envoy_counts, shadow_mode)},
};

void pd_envoy_metrics_write(struct evbuffer *out, pd_envoy_metrics *m) {
    pthread_mutex_lock(&m->mu);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        evbuffer_add_printf(out,
                            "# HELP porteirod_envoy_%s_total envoy rule: %s\n"
                            "# TYPE porteirod_envoy_%s_total counter\n",
                            kinds[k].name, kinds[k].help, kinds[k].name);
        for (size_t i = 0; i < SLOTS; i++) {
            const series *s = &m->slots[i];
            if (s->name == NULL)
                continue;
            evbuffer_add_printf(out, "porteirod_envoy_%s_total{rule=\"", kinds[k].name);
            pd_metrics_label_value(out, s->name);
            evbuffer_add_printf(
                out, "\"} %llu\n",
                (unsigned long long)*(const uint64_t *)((const char *)&s->c + kinds[k].offset));
        }
        evbuffer_add_printf(
            out, "porteirod_envoy_%s_total{rule=\"\"} %llu\n", kinds[k].name,
            (unsigned long long)*(const uint64_t *)((const char *)&m->other + kinds[k].offset));
    }
    pthread_mutex_unlock(&m->mu);
}
