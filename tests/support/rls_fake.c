/* rls_fake.c — the test-only decision side (rls_fake.h). */
#include "rls_fake.h"

#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/worker.h"
#include "envoy/envoy_rls.h"

#define MAX_COUNTERS 256
#define NAME_PART 40

typedef struct counter {
    char key[2 * NAME_PART + 64];
    uint64_t used;
} counter;

static struct event_base *loop;
static int slow_ms;
static counter counters[MAX_COUNTERS];
static size_t ncounters;
static atomic_bool serving = true;
static atomic_long decisions;
static atomic_long refused;

void rls_fake_init(struct event_base *base, int slow) {
    loop = base;
    slow_ms = slow;
}
void rls_fake_set_serving(bool on) {
    atomic_store(&serving, on);
}
long rls_fake_decisions(void) {
    return atomic_load(&decisions);
}
long rls_fake_refused(void) {
    return atomic_load(&refused);
}

/* The pieces of the worker the gRPC server calls itself. */
void pd_worker_count_refused(pd_worker *w) {
    (void)w;
    atomic_fetch_add(&refused, 1);
}
void pd_worker_count_accepted(pd_worker *w, pd_listener listener) {
    (void)w;
    (void)listener;
}

static counter *find(const char *key) {
    for (size_t i = 0; i < ncounters; i++)
        if (strcmp(counters[i].key, key) == 0)
            return &counters[i];
    if (ncounters == MAX_COUNTERS)
        return &counters[0]; /* tests stay far below */
    snprintf(counters[ncounters].key, sizeof(counters[0].key), "%s", key);
    return &counters[ncounters++];
}

static void error(pd_rls_done_fn *done, void *arg, int status, const char *text) {
    pd_rls_response r = {.grpc_status = status, .grpc_message = text};
    done(&r, arg);
}

/* The answer of one request, made now. */
static void decide(const pd_rls_request *req, pd_rls_done_fn *done, void *arg) {
    size_t n = req->ndescriptors;
    pd_rls_status *st = calloc(n, sizeof(*st));
    char(*names)[2 * NAME_PART + 2] = calloc(n, sizeof(*names));
    counter **cs = calloc(n, sizeof(*cs));
    uint64_t *hits = calloc(n, sizeof(*hits));
    if (st == NULL || names == NULL || cs == NULL || hits == NULL)
        abort();
    bool over = false;
    for (size_t i = 0; i < n; i++) {
        const pd_rls_descriptor *d = &req->descriptors[i];
        const pd_rls_entry *e = d->nentries > 0 ? &d->entries[0] : NULL;
        snprintf(names[i], sizeof(names[i]), "%.*s=%.*s",
                 e ? (int)(e->key_len < NAME_PART ? e->key_len : NAME_PART) : 0, e ? e->key : "",
                 e ? (int)(e->value_len < NAME_PART ? e->value_len : NAME_PART) : 0,
                 e ? e->value : "");
        char key[sizeof(counters[0].key)];
        snprintf(key, sizeof(key), "%.*s/%s", (int)(req->domain_len < 40 ? req->domain_len : 40),
                 req->domain, names[i]);
        cs[i] = find(key);
        hits[i] = d->has_hits_addend ? d->hits_addend : req->hits_addend ? req->hits_addend : 1;
        st[i].has_limit = true;
        st[i].limit_name = names[i];
        st[i].requests_per_unit = d->has_limit ? d->limit_requests_per_unit : 3;
        st[i].unit = d->has_limit ? d->limit_unit : PD_RLS_MINUTE;
        st[i].duration_until_reset_ms = 1500;
        if (cs[i]->used + hits[i] > st[i].requests_per_unit)
            over = true;
    }
    for (size_t i = 0; i < n; i++) { /* all or nothing */
        if (!over)
            cs[i]->used += hits[i];
        bool this_over = over && cs[i]->used + hits[i] > st[i].requests_per_unit;
        st[i].code = this_over ? PD_RLS_OVER_LIMIT : PD_RLS_OK;
        st[i].limit_remaining = cs[i]->used >= st[i].requests_per_unit
                                    ? 0
                                    : (uint32_t)(st[i].requests_per_unit - cs[i]->used);
    }
    pd_rls_header headers[] = {{"x-ratelimit-limit", "3"}, {"x-ratelimit-remaining", "2"}};
    bool with_headers = req->domain_len == 7 && memcmp(req->domain, "headers", 7) == 0;
    pd_rls_response r = {.grpc_status = PD_GRPC_OK,
                         .grpc_message = "",
                         .overall_code = over ? PD_RLS_OVER_LIMIT : PD_RLS_OK,
                         .statuses = st,
                         .nstatuses = n,
                         .headers = with_headers ? headers : NULL,
                         .nheaders = with_headers ? 2 : 0};
    atomic_fetch_add(&decisions, 1);
    done(&r, arg);
    free(st);
    free(names);
    free(cs);
    free(hits);
}

typedef struct later {
    struct event *ev;
    pd_rls_done_fn *done;
    void *arg;
} later;

static void on_later(evutil_socket_t fd, short what, void *p) {
    later *l = p;
    (void)fd;
    (void)what;
    pd_rls_descriptor d = {0};
    pd_rls_entry e = {"slow", 4, "1", 1};
    d.entries = &e;
    d.nentries = 1;
    d.has_limit = true;
    d.limit_requests_per_unit = 1000000;
    d.limit_unit = PD_RLS_SECOND;
    pd_rls_request req = {.domain = "slow", .domain_len = 4, .descriptors = &d, .ndescriptors = 1};
    decide(&req, l->done, l->arg);
    event_free(l->ev);
    free(l);
}

void pd_rls_should_rate_limit(struct pd_worker *w, const pd_rls_request *req, pd_rls_done_fn *done,
                              void *arg) {
    (void)w;
    if (req->domain_len == 0) {
        error(done, arg, PD_GRPC_INVALID_ARGUMENT, "domain: empty");
        return;
    }
    if (req->ndescriptors == 0) {
        error(done, arg, PD_GRPC_INVALID_ARGUMENT, "descriptors: none");
        return;
    }
    if (req->domain_len == 4 && memcmp(req->domain, "slow", 4) == 0) {
        later *l = calloc(1, sizeof(*l));
        l->ev = evtimer_new(loop, on_later, l);
        l->done = done;
        l->arg = arg;
        struct timeval tv = {slow_ms / 1000, slow_ms % 1000 * 1000};
        evtimer_add(l->ev, &tv);
        return;
    }
    decide(req, done, arg);
}

void pd_rls_health(struct pd_worker *w, pd_rls_health_fn *done, void *arg) {
    (void)w;
    done(atomic_load(&serving), arg);
}
