/* bench_threads.c — the threaded engine: one thread per connection, each
 * with its own handle (handles serialise their calls), sending `pipeline`
 * checks per round trip with porteiro_check_many. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "progress.h"

typedef struct worker {
    pthread_t thread;
    porteiro_t *p;
    const bench_plan *plan;
    int64_t requests; /* this worker's share */
    uint64_t rng;
    pthread_mutex_t *gate;   /* held by the main thread until the clock starts */
    const bool *abort;       /* set (before the gate opens) if not all started */
    atomic_size_t *finished; /* workers done, for the progress line */
    bench_result result;
} worker;

typedef struct batch {
    porteiro_request *reqs;
    char (*keys)[32];
    porteiro_decision *ds;
    porteiro_status *sts;
} batch;

/* One round trip: n checks on random keys. Returns false on a failure. */
static bool send_batch(worker *w, batch *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t len = bench_key(b->keys[i], &w->rng, w->plan->keys);
        b->reqs[i] = (porteiro_request){.limits = w->plan->limit,
                                        .nlimits = 1,
                                        .key = b->keys[i],
                                        .key_len = len,
                                        .cost = 1,
                                        .now_ms = PORTEIRO_NOW,
                                        .max_wait_ms = 0};
    }
    int64_t t0 = bench_now_us();
    porteiro_status st = porteiro_check_many(w->p, b->reqs, n, b->ds, b->sts);
    cli_latency_add(&w->result.latency, bench_now_us() - t0, n);
    for (size_t i = 0; i < n; i++)
        bench_count(&w->result, w->p, b->sts[i], &b->ds[i]);
    bench_progress_add(w->plan->progress, (int64_t)n);
    return st == PORTEIRO_OK;
}

static void *run_worker(void *arg) {
    worker *w = arg;
    size_t cap = (size_t)w->plan->pipeline;
    batch b = {malloc(cap * sizeof(*b.reqs)), malloc(cap * sizeof(*b.keys)),
               malloc(cap * sizeof(*b.ds)), malloc(cap * sizeof(*b.sts))};
    bool ok = b.reqs != NULL && b.keys != NULL && b.ds != NULL && b.sts != NULL;

    if (!ok) {
        w->result.error = PORTEIRO_ERR_NOMEM;
        snprintf(w->result.errmsg, sizeof(w->result.errmsg), "out of memory");
    }
    /* Wait for the gate: every worker starts with the clock. */
    pthread_mutex_lock(w->gate);
    pthread_mutex_unlock(w->gate);
    ok = ok && !*w->abort;
    /* A failure stops this worker: against a dead Redis every further
     * round trip would only wait for its budget. */
    for (int64_t left = w->requests; ok && left > 0;) {
        size_t n = left < (int64_t)cap ? (size_t)left : cap;
        ok = send_batch(w, &b, n);
        left -= (int64_t)n;
    }
    free(b.reqs);
    free(b.keys);
    free(b.ds);
    free(b.sts);
    atomic_fetch_add(w->finished, 1);
    return NULL;
}

static void merge(bench_result *into, const bench_result *from) {
    into->allowed += from->allowed;
    into->denied += from->denied;
    into->errors += from->errors;
    cli_latency_merge(&into->latency, &from->latency);
    if (into->error == PORTEIRO_OK && from->error != PORTEIRO_OK) {
        into->error = from->error;
        memcpy(into->errmsg, from->errmsg, sizeof(into->errmsg));
    }
}

void bench_threads(const bench_plan *plan, porteiro_t *const *handles, bench_result *out) {
    size_t c = plan->connections, started = 0;
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    bool abort = false;
    atomic_size_t finished = 0;
    worker *ws = calloc(c, sizeof(*ws));

    if (ws == NULL) {
        out->error = PORTEIRO_ERR_NOMEM;
        snprintf(out->errmsg, sizeof(out->errmsg), "out of memory");
        return;
    }
    pthread_mutex_lock(&gate);
    for (; started < c; started++) {
        ws[started] = (worker){.p = handles[started],
                               .plan = plan,
                               .gate = &gate,
                               .abort = &abort,
                               .finished = &finished,
                               .requests = bench_share(plan, started),
                               .rng = bench_seed(started)};
        if (pthread_create(&ws[started].thread, NULL, run_worker, &ws[started]) != 0)
            break;
    }
    abort = started < c;
    int64_t t0 = bench_now_us();
    pthread_mutex_unlock(&gate);
    /* The progress line, if any, from this thread while the workers run. */
    while (plan->progress != NULL && atomic_load(&finished) < started) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
        bench_progress_tick(plan->progress);
    }
    for (size_t i = 0; i < started; i++) {
        pthread_join(ws[i].thread, NULL);
        merge(out, &ws[i].result);
    }
    out->elapsed_us = bench_now_us() - t0;
    if (abort && out->error == PORTEIRO_OK) {
        out->error = PORTEIRO_ERR_NOMEM;
        snprintf(out->errmsg, sizeof(out->errmsg), "cannot start thread %zu of %zu", started + 1,
                 c);
    }
    free(ws);
}
