/* envoy_rls.c — Envoy's ShouldRateLimit decided by the library
 * (envoy_rls.h). Each request descriptor is matched against envoy
 * ratelimit's config (daemon/rules); the ones that reach a limit become the
 * items of ONE porteiro_check_async (.multi) call, tagged by the domain, so
 * that they are decided together, all-or-nothing, in one script call (a
 * request with more than PORTEIRO_MAX_LIMITS counters: one call per 8 of
 * them, each all-or-nothing); the answer is mapped back to one status per
 * descriptor. No descriptor's bytes, length, hits or limit make a request
 * fail: only porteiro's and Redis's faults do. docs/envoy.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/worker.h"
#include "rules/envoy.h"
#include "ops/envoy_metrics.h"
#include "envoy_rls.h"
#include "ops/log.h"
#include "ops/spare.h"

#define MAX_DESCRIPTORS 64  /* a request with more: INVALID_ARGUMENT */
#define SPARE_JOBS 64       /* finished jobs a worker keeps for its next requests */
#define KEPT_DESCRIPTORS 8  /* a kept job keeps its plans and statuses up to this many */
#define KEPT_KEY_BYTES 4096 /* and its counter keys' buffer up to this size */
#define MAX_CALLS ((MAX_DESCRIPTORS + PORTEIRO_MAX_LIMITS - 1) / PORTEIRO_MAX_LIMITS)

typedef enum plan_kind {
    PLAN_NONE,      /* no rule limits it (or replaced): OK, no limit */
    PLAN_UNLIMITED, /* unlimited: OK, remaining 2^32 - 1 */
    PLAN_BLOCKED,   /* requests_per_unit 0: every hit is over */
    PLAN_ITEM       /* decided by items[item] */
} plan_kind;

/* What one request descriptor became. */
typedef struct plan {
    plan_kind kind;
    int item;
    const pe_rule *rule; /* NULL for a limit the request gave */
    uint32_t rpu;
    pd_rls_unit unit;
    int64_t period_ms;
    uint64_t hits;
    bool own_hits; /* apply_on_stream_done: its own hits_addend given */
    bool shadow;
    char *metric;                      /* the series counted, NULL: none */
    const pe_rule *path[PE_MAX_DEPTH]; /* the node each entry reached */
} plan;

typedef struct rls_job rls_job;

/* One porteiro_check_async (.multi) call of a job: its items from first. */
typedef struct rls_call {
    rls_job *job;
    size_t first, n;
} rls_call;

/* One call between its request and its answer. Reused (the worker's rls_jobs):
 * job_new sets what is read before it is written; items, their key offsets
 * and top names up to nitems, the statuses, results, headers and message
 * are written first. */
struct rls_job {
    pd_worker *w;
    pd_settings *settings; /* a reference: the rules stay valid */
    pd_rls_done_fn *done;
    void *arg;
    size_t n;
    size_t cap;  /* plans, statuses and the item arrays allocated */
    plan *plans; /* n of them zeroed by job_new */
    pd_rls_status *statuses;
    porteiro_item *items;     /* at most n: one per counter */
    size_t *key_off;          /* where each item's key sits in keys */
    porteiro_result *results; /* the decision of each item */
    /* The name each item's key is counted under in the top keys:
     * "DOMAIN/RULE_KEY" (docs/top.md). */
    char (*top_names)[PORTEIRO_TOP_NAME_MAX + 1];
    size_t nitems;
    char *keys; /* the items' counter keys, one after another */
    size_t keys_len, keys_cap;
    rls_call calls[MAX_CALLS];
    size_t pending;         /* calls not answered yet (+1 while they are sent) */
    porteiro_status failed; /* the first call that failed, else PORTEIRO_OK */
    bool blocked;           /* a non-shadow descriptor with limit 0 */
    bool charge;            /* apply_on_stream_done's call: a settle, not a check */
    pd_rls_header headers[3];
    char header_values[3][24];
    char message[320];
};

static void free_arrays(rls_job *job) {
    free(job->plans);
    free(job->statuses);
    free(job->items);
    free(job->key_off);
    free(job->results);
    free(job->top_names);
    job->plans = NULL;
    job->statuses = NULL;
    job->items = NULL;
    job->key_off = NULL;
    job->results = NULL;
    job->top_names = NULL;
    job->cap = 0;
}

static void job_release(void *block) {
    rls_job *job = block;
    free_arrays(job);
    free(job->keys);
    free(job);
}

void pd_rls_spare_init(pd_spare *s) {
    *s = (pd_spare){.max = SPARE_JOBS, .release = job_release};
}

/* The call is answered: the job is kept for the next one (its arrays too,
 * unless a request with many descriptors made them large), or freed. */
static void job_free(rls_job *job) {
    for (size_t i = 0; i < job->n; i++)
        free(job->plans[i].metric);
    pd_settings_unref(job->settings);
    if (job->cap > KEPT_DESCRIPTORS)
        free_arrays(job);
    if (job->keys_cap > KEPT_KEY_BYTES) {
        free(job->keys);
        job->keys = NULL;
        job->keys_cap = 0;
    }
    if (!pd_spare_keep(&job->w->rls_jobs, job))
        job_release(job);
}

/* An answer that is not a decision (gRPC status and message). */
static void answer_error(rls_job *job, int grpc_status, const char *msg) {
    pd_rls_response r = {.grpc_status = grpc_status, .grpc_message = msg};
    job->done(&r, job->arg);
    job_free(job);
}

static int64_t unit_ms(pd_rls_unit u) {
    return pe_unit_seconds((pe_unit)u) * 1000;
}

/* The clock used for what Redis does not say (the window of a limit that
 * was only peeked or blocks everything): the injected one, or real time. */
static int64_t now_ms(const rls_job *job) {
    int64_t injected = job->w->clock_ms;
    if (injected != PORTEIRO_NOW)
        return injected;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- metric names ---------------------------------------------------- */

static void append(char *out, size_t *at, size_t cap, const char *s, size_t n) {
    if (*at + n >= cap)
        n = *at < cap - 1 ? cap - 1 - *at : 0;
    memcpy(out + *at, s, n);
    *at += n;
    out[*at] = '\0';
}

/* The rule's configured path, unless value_to_metric (a level) or
 * detailed_metric (the last, when it names no single value) asks for the
 * request's values (envoy ratelimit's examples 8 and 10). A limit the
 * request gives is counted under its own entries, as envoy ratelimit does. */
static char *metric_name(const char *domain, size_t dlen, const pd_rls_descriptor *d,
                         const pe_rule *const *path, const pe_rule *rule) {
    bool detailed = false;
    for (size_t i = 0; rule != NULL && i < d->nentries; i++)
        detailed = detailed || path[i]->value_to_metric;
    if (rule != NULL && rule->detailed_metric && (rule->value == NULL || rule->wildcard))
        detailed = true;
    if (rule != NULL && !detailed)
        return strdup(rule->path);
    char *out = malloc(PD_ENVOY_MAX_NAME + 1);
    size_t at = 0;
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    append(out, &at, PD_ENVOY_MAX_NAME + 1, domain, dlen);
    for (size_t i = 0; i < d->nentries; i++) {
        const pd_rls_entry *e = &d->entries[i];
        const pe_rule *r = rule != NULL ? path[i] : NULL;
        append(out, &at, PD_ENVOY_MAX_NAME + 1, ".", 1);
        append(out, &at, PD_ENVOY_MAX_NAME + 1, e->key, e->key_len);
        bool runtime =
            r == NULL || r->value_to_metric ||
            (i + 1 == d->nentries && r->detailed_metric && (r->value == NULL || r->wildcard));
        const char *v = runtime ? e->value : r->value;
        size_t vlen = runtime ? e->value_len : (v != NULL ? strlen(v) : 0);
        if (runtime && r != NULL && r->value != NULL && r->detailed_metric && !r->value_to_metric) {
            /* detailed: the configured value, then the request's */
            append(out, &at, PD_ENVOY_MAX_NAME + 1, "_", 1);
            append(out, &at, PD_ENVOY_MAX_NAME + 1, r->value, strlen(r->value));
        }
        if (v != NULL && vlen > 0) {
            append(out, &at, PD_ENVOY_MAX_NAME + 1, "_", 1);
            append(out, &at, PD_ENVOY_MAX_NAME + 1, v, vlen);
        }
    }
    return out;
}

/* ---- planning: descriptors into items --------------------------------- */

static uint64_t hits_of(const pd_rls_request *req, const pd_rls_descriptor *d, bool own) {
    if (own || (d->has_hits_addend && d->hits_addend > 0))
        return d->hits_addend;
    return req->hits_addend > 0 ? req->hits_addend : 1;
}

/* replaces: a limit some other matched limit names in its replaces list
 * limits nothing (envoy ratelimit's example 7). */
static void apply_replaces(rls_job *job) {
    for (size_t i = 0; i < job->n; i++) {
        const pe_rule *r = job->plans[i].rule;
        if (r == NULL || job->plans[i].kind == PLAN_NONE || r->name[0] == '\0')
            continue;
        for (size_t j = 0; j < job->n; j++) {
            const pe_rule *by = job->plans[j].rule;
            for (size_t k = 0; by != NULL && job->plans[j].kind != PLAN_NONE && k < by->nreplaces;
                 k++)
                if (strcmp(by->replaces[k], r->name) == 0)
                    job->plans[i].kind = PLAN_NONE;
        }
    }
}

/* "DOMAIN/RULE_KEY": the domain, then the rule's path without it (its
 * keys and configured values, as the rule's metric names it), or for a
 * limit the request gave, its entries' keys; cut to fit. */
static void top_name(char *out, const pd_rls_request *req, const pd_rls_descriptor *d,
                     const pe_rule *rule) {
    size_t at = 0, cap = PORTEIRO_TOP_NAME_MAX + 1;
    out[0] = '\0';
    append(out, &at, cap, req->domain, req->domain_len);
    append(out, &at, cap, "/", 1);
    if (rule != NULL && rule->path != NULL) {
        const char *rest = rule->path;
        if (strncmp(rest, req->domain, req->domain_len) == 0 && rest[req->domain_len] == '.')
            rest += req->domain_len + 1;
        append(out, &at, cap, rest, strlen(rest));
        return;
    }
    for (size_t i = 0; i < d->nentries; i++) {
        if (i > 0)
            append(out, &at, cap, ".", 1);
        append(out, &at, cap, d->entries[i].key, d->entries[i].key_len);
    }
}

/* The most bytes pe_counter_key writes for these entries (each key and
 * value after its decimal length and ':'). */
static size_t counter_key_room(const pd_rls_descriptor *d, const pe_rule *const *path) {
    size_t room = 0;
    for (size_t k = 0; k < d->nentries; k++) {
        const pe_rule *r = path != NULL ? path[k] : NULL;
        size_t v = r != NULL && r->share_threshold && r->wildcard ? strlen(r->value)
                                                                  : d->entries[k].value_len;
        room += 2 * 21 + d->entries[k].key_len + v;
    }
    return room;
}

/* Makes descriptor i's item, or joins the one with the same counter and
 * limit (two descriptors of one counter add their hits, as envoy
 * ratelimit's own counters do). Another limit on the same counter is an
 * item of its own: porteiro makes them one counter with both limits
 * checked (porteiro_multi_request). A counter key of any length: porteiro
 * stores a long one under its digest. 0, or -1 (no memory). */
static int add_item(rls_job *job, const pd_rls_request *req, size_t i) {
    plan *p = &job->plans[i];
    const pd_rls_descriptor *d = &req->descriptors[i];
    const pe_rule *const *path = p->rule != NULL ? p->path : NULL;
    pe_entry entries[PE_MAX_DEPTH];
    for (size_t k = 0; k < d->nentries; k++)
        entries[k] = (pe_entry){d->entries[k].key, d->entries[k].key_len, d->entries[k].value,
                                d->entries[k].value_len};
    size_t room = counter_key_room(d, path);
    if (job->keys_len + room > job->keys_cap) {
        size_t cap = job->keys_cap > 0 ? job->keys_cap : 1024;
        while (cap < job->keys_len + room)
            cap *= 2;
        char *keys = realloc(job->keys, cap);
        if (keys == NULL)
            return -1;
        job->keys = keys;
        job->keys_cap = cap;
    }
    char *key = job->keys + job->keys_len;
    size_t len = pe_counter_key(entries, d->nentries, path, key, room);
    for (size_t k = 0; k < job->nitems; k++) {
        porteiro_item *it = &job->items[k];
        if (it->key_len == len && memcmp(job->keys + job->key_off[k], key, len) == 0 &&
            it->limit.period_ms == p->period_ms && it->limit.limit == (int64_t)p->rpu) {
            p->item = (int)k;
            it->cost += (int64_t)p->hits;
            if (it->cost > PORTEIRO_MAX_AMOUNT)
                it->cost = PORTEIRO_MAX_AMOUNT;
            it->shadow = it->shadow && p->shadow;
            return 0;
        }
    }
    job->key_off[job->nitems] = job->keys_len;
    job->keys_len += len;
    top_name(job->top_names[job->nitems], req, d, p->rule);
    p->item = (int)job->nitems;
    job->items[job->nitems++] = (porteiro_item){
        .limit = {PORTEIRO_FIXED_WINDOW, p->rpu, p->period_ms, 0},
        .key = NULL, /* set once every key is in job->keys (it may move) */
        .key_len = len,
        .cost = (int64_t)p->hits,
        .shadow = p->shadow,
        .top_name = job->top_names[p->item],
    };
    return 0;
}

/* Descriptor i: its limit (the request's own, or the rule it reaches). */
static int plan_one(rls_job *job, const pd_rls_request *req, const pe_domain *dom, size_t i) {
    plan *p = &job->plans[i];
    const pd_rls_descriptor *d = &req->descriptors[i];
    const pe_rule **path = p->path;
    p->kind = PLAN_NONE;
    /* hits above 10^9 count 10^9: more than any limit porteiro holds
     * takes at once (denied, as envoy ratelimit denies them). */
    p->own_hits = job->settings->envoy->apply_on_stream_done && d->has_hits_addend;
    p->hits = hits_of(req, d, p->own_hits);
    if (p->hits > PORTEIRO_MAX_AMOUNT)
        p->hits = PORTEIRO_MAX_AMOUNT;
    if (d->has_limit) {
        p->rpu = d->limit_requests_per_unit;
        p->unit = d->limit_unit;
    } else {
        pe_entry e[PE_MAX_DEPTH];
        if (dom == NULL || d->nentries == 0 || d->nentries > PE_MAX_DEPTH)
            return 0;
        for (size_t k = 0; k < d->nentries; k++)
            e[k] = (pe_entry){d->entries[k].key, d->entries[k].key_len, d->entries[k].value,
                              d->entries[k].value_len};
        p->rule = pe_match(dom, e, d->nentries, path);
        if (p->rule == NULL)
            return 0;
        p->metric = metric_name(req->domain, req->domain_len, d, path, p->rule);
        if (p->rule->unlimited) {
            p->kind = PLAN_UNLIMITED;
            return 0;
        }
        p->rpu = p->rule->requests_per_unit;
        p->unit = (pd_rls_unit)p->rule->unit;
        p->shadow = p->rule->shadow_mode;
    }
    p->period_ms = unit_ms(p->unit);
    if (p->period_ms == 0 || d->nentries == 0 || d->nentries > PE_MAX_DEPTH)
        return 0; /* a limit with no unit, or no entries: nothing to count */
    if (p->rule == NULL)
        p->metric = metric_name(req->domain, req->domain_len, d, path, NULL);
    /* A limit the request gives above 10^9 per unit: porteiro counts up
     * to 10^9 (its bound on L), so it limits at 10^9. */
    if (p->rpu > PORTEIRO_MAX_AMOUNT)
        p->rpu = PORTEIRO_MAX_AMOUNT;
    p->kind = p->rpu == 0 ? PLAN_BLOCKED : PLAN_ITEM;
    return 0;
}

/* ---- the answer --------------------------------------------------------- */

static int64_t window_left(const rls_job *job, int64_t period_ms) {
    int64_t now = now_ms(job);
    return period_ms - now % period_ms;
}

/* Counts one descriptor's hits in its rule's series. */
static void count(rls_job *job, const plan *p, const pd_rls_status *st, bool over, int64_t after) {
    if (p->metric == NULL)
        return;
    pd_envoy_counts c = {.total_hits = p->hits};
    if (over) {
        c.over_limit = p->hits;
        c.shadow_mode = st->code == PD_RLS_OK ? p->hits : 0;
    } else if (p->kind == PLAN_ITEM || p->kind == PLAN_BLOCKED) {
        c.within_limit = p->hits;
        int64_t near = (int64_t)p->rpu * job->settings->envoy->near_limit_permille / 1000;
        int64_t before = after - (int64_t)p->hits;
        if (after > near)
            c.near_limit = (uint64_t)(after - (before > near ? before : near));
    } else {
        c.within_limit = p->hits;
    }
    pd_envoy_metrics_add(job->w->shared->envoy_metrics, p->metric, strlen(p->metric), &c);
}

/* RateLimit-Limit / -Remaining / -Reset of the status with the least
 * remaining, as envoy ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED adds them. */
static size_t add_headers(rls_job *job) {
    const pd_rls_status *min = NULL;
    for (size_t i = 0; i < job->n; i++)
        if (job->statuses[i].has_limit &&
            (min == NULL || job->statuses[i].limit_remaining < min->limit_remaining))
            min = &job->statuses[i];
    if (min == NULL)
        return 0;
    static const char *const names[] = {"RateLimit-Limit", "RateLimit-Remaining",
                                        "RateLimit-Reset"};
    snprintf(job->header_values[0], 24, "%u", min->requests_per_unit);
    snprintf(job->header_values[1], 24, "%u", min->limit_remaining);
    snprintf(job->header_values[2], 24, "%lld",
             (long long)((min->duration_until_reset_ms + 999) / 1000));
    for (size_t k = 0; k < 3; k++)
        job->headers[k] = (pd_rls_header){names[k], job->header_values[k]};
    return 3;
}

/* Descriptor i's status from its item's result (none when no item was
 * asked). */
static bool status_of(rls_job *job, size_t i) {
    const plan *p = &job->plans[i];
    pd_rls_status *st = &job->statuses[i];
    *st = (pd_rls_status){.code = PD_RLS_OK, .limit_name = "", .duration_until_reset_ms = -1};
    if (p->kind == PLAN_NONE || p->kind == PLAN_UNLIMITED) {
        st->limit_remaining = p->kind == PLAN_UNLIMITED ? UINT32_MAX : 0;
        count(job, p, st, false, 0);
        return false;
    }
    st->has_limit = true;
    st->limit_name = p->rule != NULL ? p->rule->name : "";
    st->requests_per_unit = p->rpu;
    st->unit = p->unit;
    bool over = p->kind == PLAN_BLOCKED;
    int64_t after = 0, reset = 0;
    if (p->kind == PLAN_ITEM) {
        const porteiro_result *r = &job->results[p->item];
        over = !r->allowed;
        /* apply_on_stream_done: a check of its own hits 0 takes nothing and
         * asks whether anything is left; a charge is never over. */
        if (p->own_hits && !job->charge && p->hits == 0)
            over = r->remaining == 0;
        st->limit_remaining =
            over ? 0 : (uint32_t)(r->remaining < UINT32_MAX ? r->remaining : UINT32_MAX);
        after = p->rpu - r->remaining;
        reset = r->reset_ms > 0 ? r->reset_ms : r->retry_after_ms;
    }
    st->duration_until_reset_ms = reset > 0 ? reset : window_left(job, p->period_ms);
    st->code = over && !p->shadow ? PD_RLS_OVER_LIMIT : PD_RLS_OK;
    count(job, p, st, over, after);
    return st->code == PD_RLS_OVER_LIMIT;
}

static void answer(rls_job *job) {
    bool any_over = false;
    for (size_t i = 0; i < job->n; i++)
        any_over = status_of(job, i) || any_over;
    const pd_envoy_config *e = job->settings->envoy;
    pd_rls_response r = {
        .grpc_status = PD_GRPC_OK,
        .grpc_message = "",
        /* Global shadow mode: every request passes, each status says what
         * its limit would have done (envoy ratelimit's SHADOW_MODE). */
        .overall_code = any_over && !e->shadow_mode ? PD_RLS_OVER_LIMIT : PD_RLS_OK,
        .statuses = job->statuses,
        .nstatuses = job->n,
        .headers = job->headers,
        .nheaders = e->response_headers ? add_headers(job) : 0,
    };
    job->done(&r, job->arg);
    job_free(job);
}

/* One call's answer is in; the last one answers the request. */
static void call_done(rls_job *job) {
    if (--job->pending > 0)
        return;
    if (job->failed != PORTEIRO_OK) { /* on_error: error, and Redis failed */
        snprintf(job->message, sizeof(job->message), "rate limiter unavailable: %s",
                 porteiro_strerror(job->failed));
        answer_error(job, PD_GRPC_UNAVAILABLE, job->message);
        return;
    }
    answer(job);
}

static void on_decision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    rls_call *c = arg;
    rls_job *job = c->job;
    (void)p;
    pd_worker_in_flight_add(job->w, -1);
    if (st != PORTEIRO_OK && job->failed == PORTEIRO_OK)
        job->failed = st;
    for (size_t k = 0; st == PORTEIRO_OK && k < c->n; k++)
        job->results[c->first + k] = d->limits[k];
    call_done(job);
}

/* A job for req (1..MAX_DESCRIPTORS descriptors): a kept one, or a new
 * one; NULL when out of memory. */
static rls_job *job_new(pd_worker *w, const pd_rls_request *req, pd_rls_done_fn *done, void *arg) {
    size_t n = req->ndescriptors;
    rls_job *job = pd_spare_take(&w->rls_jobs);
    if (job == NULL) {
        job = calloc(1, sizeof(*job));
        if (job == NULL)
            return NULL;
    }
    if (job->plans == NULL || job->cap < n) {
        free_arrays(job);
        size_t cap = n > KEPT_DESCRIPTORS ? n : KEPT_DESCRIPTORS;
        job->plans = malloc(cap * sizeof(*job->plans));
        job->statuses = malloc(cap * sizeof(*job->statuses));
        job->items = malloc(cap * sizeof(*job->items));
        job->key_off = malloc(cap * sizeof(*job->key_off));
        job->results = malloc(cap * sizeof(*job->results));
        job->top_names = malloc(cap * sizeof(*job->top_names));
        if (job->plans == NULL || job->statuses == NULL || job->items == NULL ||
            job->key_off == NULL || job->results == NULL || job->top_names == NULL) {
            job_release(job);
            return NULL;
        }
        job->cap = cap;
    }
    memset(job->plans, 0, n * sizeof(*job->plans));
    job->w = w;
    job->settings = pd_shared_settings(w->shared);
    job->done = done;
    job->arg = arg;
    job->n = n;
    job->nitems = 0;
    job->keys_len = 0;
    job->pending = 0;
    job->failed = PORTEIRO_OK;
    job->blocked = false;
    job->charge = false;
    return job;
}

static const char *bad_request(const pd_rls_request *req) {
    if (req->domain == NULL || req->domain_len == 0)
        return "rate limit domain must not be empty";
    if (req->ndescriptors == 0 || req->descriptors == NULL)
        return "rate limit descriptor list must not be empty";
    if (req->ndescriptors > MAX_DESCRIPTORS)
        return "more than 64 descriptors in one request";
    return NULL;
}

void pd_rls_should_rate_limit(pd_worker *w, const pd_rls_request *req, pd_rls_done_fn *done,
                              void *arg) {
    const char *bad = bad_request(req);
    if (bad != NULL) {
        pd_rls_response r = {.grpc_status = PD_GRPC_INVALID_ARGUMENT, .grpc_message = bad};
        done(&r, arg);
        return;
    }
    rls_job *job = job_new(w, req, done, arg);
    if (job == NULL) {
        pd_rls_response r = {.grpc_status = PD_GRPC_RESOURCE_EXHAUSTED,
                             .grpc_message = "out of memory"};
        done(&r, arg);
        return;
    }
    if (job->settings->envoy_rules == NULL) {
        answer_error(job, PD_GRPC_UNAVAILABLE, "no envoy: section in porteirod's configuration");
        return;
    }
    const pe_domain *dom = pe_domain_find(job->settings->envoy_rules, req->domain, req->domain_len);
    for (size_t i = 0; i < job->n; i++) {
        if (plan_one(job, req, dom, i) != 0) {
            answer_error(job, PD_GRPC_INVALID_ARGUMENT, job->message);
            return;
        }
    }
    apply_replaces(job);
    /* apply_on_stream_done: a request with a descriptor of its own hits
     * N > 0 is Envoy's call once the stream is done; it charges those
     * descriptors (a settle with estimate 0: never denied, past the limit
     * if need be), and the others of it count nothing. */
    for (size_t i = 0; i < job->n; i++)
        job->charge = job->charge || (job->plans[i].own_hits && job->plans[i].hits > 0 &&
                                      job->plans[i].kind == PLAN_ITEM);
    for (size_t i = 0; job->charge && i < job->n; i++)
        if (!job->plans[i].own_hits || job->plans[i].hits == 0 || job->plans[i].kind != PLAN_ITEM)
            job->plans[i].kind = PLAN_NONE;
    for (size_t i = 0; i < job->n; i++) {
        const plan *p = &job->plans[i];
        job->blocked = job->blocked || (p->kind == PLAN_BLOCKED && !p->shadow);
        if (p->kind == PLAN_ITEM && add_item(job, req, i) != 0) {
            answer_error(job, PD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
    }
    for (size_t k = 0; k < job->nitems; k++)
        job->items[k].key = job->keys + job->key_off[k];
    /* A descriptor limited to 0 denies the request: nothing is taken, the
     * others are peeked so that their statuses say where they stand. */
    for (size_t k = 0; job->blocked && k < job->nitems; k++)
        job->items[k].cost = 0;
    if (job->nitems == 0) {
        answer(job);
        return;
    }
    /* Up to PORTEIRO_MAX_LIMITS counters a call, each call all-or-nothing.
     * pending holds one more until every call is sent, so an answer given
     * inside the call (the deny cache, an open breaker) cannot end the job
     * before the others are sent. The lease is the settings' of this job:
     * a reload changes it for the requests that come after. */
    size_t ncalls = (job->nitems + PORTEIRO_MAX_LIMITS - 1) / PORTEIRO_MAX_LIMITS;
    job->pending = ncalls + 1;
    for (size_t c = 0; c < ncalls; c++) {
        rls_call *call = &job->calls[c];
        size_t first = c * PORTEIRO_MAX_LIMITS;
        *call = (rls_call){job, first,
                           job->nitems - first < PORTEIRO_MAX_LIMITS ? job->nitems - first
                                                                     : PORTEIRO_MAX_LIMITS};
        porteiro_multi_request m = {.tag = req->domain,
                                    .tag_len = req->domain_len,
                                    .items = job->items + first,
                                    .nitems = call->n,
                                    .now_ms = w->clock_ms,
                                    .lease = job->settings->envoy->lease};
        pd_worker_in_flight_add(w, 1);
        /* A charge settles what the items used against estimates of 0
         * (the check took nothing). */
        porteiro_request mr = {.multi = &m};
        porteiro_status st =
            job->charge ? porteiro_settle_async(w->limiter, &mr, &(porteiro_usage){.age_ms = -1},
                                                on_decision, call)
                        : porteiro_check_async(w->limiter, &mr, on_decision, call);
        if (st != PORTEIRO_OK) { /* no callback will come: porteiro's own fault */
            pd_worker_in_flight_add(w, -1);
            pd_log(PD_LOG_ERROR, "envoy: %s: %s", porteiro_strerror(st),
                   porteiro_errmsg(w->limiter));
            if (job->failed == PORTEIRO_OK)
                job->failed = st;
            job->pending--;
        }
    }
    call_done(job);
}

/* ---- health -------------------------------------------------------------- */

typedef struct health_job {
    pd_worker *w;
    pd_rls_health_fn *done;
    void *arg;
} health_job;

static void on_probe(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    health_job *h = arg;
    (void)p;
    pd_worker_in_flight_add(h->w, -1);
    h->done(st == PORTEIRO_OK && d->fallback == PORTEIRO_FALLBACK_NONE, h->arg);
    free(h);
}

/* SERVING when Redis gives a real answer to a peek (as /healthz); the
 * memory backend always serves. */
void pd_rls_health(pd_worker *w, pd_rls_health_fn *done, void *arg) {
    static const porteiro_limit probe = {PORTEIRO_FIXED_WINDOW, 1, 1000, 0};
    static const char key[] = "porteirod:healthz";
    health_job *h = w->shared->uses_redis ? malloc(sizeof(*h)) : NULL;
    if (h == NULL) {
        done(!w->shared->uses_redis, arg);
        return;
    }
    *h = (health_job){w, done, arg};
    porteiro_request peek = {.limits = &probe,
                             .nlimits = 1,
                             .key = key,
                             .key_len = sizeof(key) - 1,
                             .cost = 0,
                             .now_ms = PORTEIRO_NOW,
                             .max_wait_ms = 0};
    pd_worker_in_flight_add(w, 1);
    if (porteiro_check_async(w->limiter, &peek, on_probe, h) != PORTEIRO_OK) {
        pd_worker_in_flight_add(w, -1);
        free(h);
        done(false, arg);
    }
}
