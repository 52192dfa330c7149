/* worker.c — one worker's shared context (worker.h). */
#include "worker.h"

#include <pthread.h>

int pd_worker_init(pd_worker *w, pd_shared *shared, porteiro_t *limiter) {
    *w = (pd_worker){.shared = shared, .limiter = limiter, .clock_ms = PORTEIRO_NOW, .index = -1};
    return pd_shared_add_limiter(shared, limiter);
}

void pd_worker_release(pd_worker *w) {
    pd_spare_free(&w->rls_jobs);
}

void pd_worker_in_flight_add(pd_worker *w, int delta) {
    if (delta < 0)
        w->in_flight -= (size_t)-delta;
    else
        w->in_flight += (size_t)delta;
}

void pd_worker_count_refused(pd_worker *w) {
    pd_shared_count_refused(w->shared);
}

void pd_worker_count_accepted(pd_worker *w, pd_listener listener) {
    pd_shared_count_accepted(w->shared, w->index, listener);
}

void pd_worker_count_decision(pd_worker *w, const char *policy, porteiro_status st,
                              const porteiro_decision *d) {
    pthread_mutex_lock(&w->shared->mu);
    pd_metrics_count(&w->shared->metrics, policy, st, d);
    pthread_mutex_unlock(&w->shared->mu);
}
