/* failover.c — the circuit breaker, and what a failed Redis call turns into
 * (open, closed, local or the error itself). */
#include "failover.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "algorithms.h"
#include "handle.h"

int64_t pt_breaker_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pt_breaker_init(pt_breaker *b, int threshold, int base_backoff_ms) {
    memset(b, 0, sizeof(*b));
    b->threshold = threshold;
    b->base_backoff_ms = base_backoff_ms;
    b->backoff_ms = base_backoff_ms;
    b->rng = 0x2545f4914f6cdd1dULL ^ (uint64_t)pt_breaker_clock();
}

/* xorshift64: jitter only, not security. */
static uint64_t next_random(pt_breaker *b) {
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return b->rng;
}

bool pt_breaker_allow(pt_breaker *b, int64_t now_ms) {
    if (b->state == PT_BREAKER_CLOSED)
        return true;
    if (b->state == PT_BREAKER_OPEN && now_ms >= b->retry_at_ms) {
        b->state = PT_BREAKER_HALF_OPEN;
        return true; /* this caller is the single probe */
    }
    return false;
}

void pt_breaker_success(pt_breaker *b) {
    if (b->state != PT_BREAKER_CLOSED)
        fprintf(stderr, "porteiro: redis is back, circuit breaker closed\n");
    b->state = PT_BREAKER_CLOSED;
    b->failures = 0;
    b->backoff_ms = b->base_backoff_ms;
}

void pt_breaker_failure(pt_breaker *b, int64_t now_ms) {
    b->failures++;
    if (b->threshold < 0)
        return;
    if (b->state == PT_BREAKER_HALF_OPEN) {
        /* A failed probe: wait longer next time, up to the cap. */
        b->backoff_ms = b->backoff_ms * 2 < PT_BREAKER_MAX_BACKOFF_MS ? b->backoff_ms * 2
                                                                      : PT_BREAKER_MAX_BACKOFF_MS;
    } else if (b->state == PT_BREAKER_CLOSED && b->failures >= b->threshold) {
        fprintf(stderr, "porteiro: redis failed %d times in a row, circuit breaker open\n",
                b->failures);
        b->opened++;
    } else {
        return;
    }
    /* Jitter of up to a quarter keeps a fleet from probing in lockstep. */
    int64_t jitter = b->backoff_ms / 4 > 0 ? (int64_t)(next_random(b) % (uint64_t)(b->backoff_ms / 4)) : 0;
    b->state = PT_BREAKER_OPEN;
    b->retry_at_ms = now_ms + b->backoff_ms + jitter;
}

bool pt_status_is_redis_failure(int status) {
    switch (status) {
    case PORTEIRO_ERR_CONNECT:
    case PORTEIRO_ERR_TIMEOUT:
    case PORTEIRO_ERR_REDIS:
    case PORTEIRO_ERR_AUTH:
    case PORTEIRO_ERR_PROTOCOL:
    case PORTEIRO_ERR_CIRCUIT_OPEN:
        return true;
    default:
        return false;
    }
}

porteiro_status pt_fallback(porteiro_t *p, const pt_call *call, porteiro_status failure,
                            porteiro_decision *d) {
    porteiro_on_error mode = call->on_error >= 0 ? (porteiro_on_error)call->on_error : p->opts.on_error;

    if (mode == PORTEIRO_ON_ERROR_ERROR)
        return failure;
    if (mode == PORTEIRO_ON_ERROR_LOCAL) {
        porteiro_status st = pt_memory_check(p->memory, call, p->opts.local_divisor, d);
        if (st != PORTEIRO_OK)
            return st;
        d->fallback = PORTEIRO_FALLBACK_LOCAL;
        d->fallback_reason = failure;
        return PORTEIRO_OK;
    }
    /* open / closed: nothing is known about the real state. */
    bool allow = mode == PORTEIRO_ON_ERROR_OPEN;
    memset(d, 0, sizeof(*d));
    d->nlimits = call->nlimits;
    for (size_t i = 0; i < call->nlimits; i++) {
        int64_t cap = pt_limit_capacity(&call->limits[i]);
        d->limits[i] = (porteiro_result){
            .allowed = allow,
            .limit = cap,
            .remaining = allow ? cap : 0,
            .reset_ms = 0,
            /* A denied client is told to come back once the breaker may
             * have closed again. */
            .retry_after_ms = allow ? 0 : p->opts.breaker_cooldown_ms,
        };
    }
    pt_decision_finish(d);
    d->fallback = allow ? PORTEIRO_FALLBACK_OPEN : PORTEIRO_FALLBACK_CLOSED;
    d->fallback_reason = failure;
    return PORTEIRO_OK;
}

porteiro_status pt_decide(porteiro_t *p, const pt_call *calls, size_t n,
                          porteiro_decision *decisions, porteiro_status *statuses) {
    porteiro_status first = PORTEIRO_OK;

    if (p->redis == NULL) {
        for (size_t i = 0; i < n; i++) {
            statuses[i] = pt_memory_check(p->memory, &calls[i], 1, &decisions[i]);
            if (statuses[i] == PORTEIRO_ERR_FULL)
                snprintf(p->errmsg, sizeof(p->errmsg),
                         "memory backend full: %zu live keys (memory_max_keys); "
                         "a new key can be stored once one expires",
                         p->opts.memory_max_keys);
            pt_stats_decision(&p->stats, statuses[i], &decisions[i]);
            if (first == PORTEIRO_OK)
                first = statuses[i];
        }
        return first;
    }
    if (pt_breaker_allow(&p->breaker, pt_breaker_clock())) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pt_redis_check_many(p->redis, calls, n, decisions, statuses, p->errmsg, sizeof(p->errmsg));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        /* The breaker counts round trips that failed as a whole; a script
         * error on one key (WRONGTYPE) is a failure too. */
        bool failed = false, timeout = false;
        for (size_t i = 0; i < n; i++) {
            failed = failed || pt_status_is_redis_failure(statuses[i]);
            timeout = timeout || statuses[i] == PORTEIRO_ERR_TIMEOUT;
        }
        int64_t us = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
        pt_stats_round_trip(&p->stats, us, failed, timeout);
        if (failed)
            pt_breaker_failure(&p->breaker, pt_breaker_clock());
        else
            pt_breaker_success(&p->breaker);
    } else {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: circuit breaker open, not called");
        for (size_t i = 0; i < n; i++)
            statuses[i] = PORTEIRO_ERR_CIRCUIT_OPEN;
        p->stats.breaker_skips += n;
    }
    for (size_t i = 0; i < n; i++) {
        if (pt_status_is_redis_failure(statuses[i]))
            statuses[i] = pt_fallback(p, &calls[i], statuses[i], &decisions[i]);
        pt_stats_decision(&p->stats, statuses[i], &decisions[i]);
        if (first == PORTEIRO_OK)
            first = statuses[i];
    }
    return first;
}
