/* failover.c — the circuit breaker, and what a failed Redis call turns into
 * (open, closed, local or the error itself). */
#include "limiter/failover.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/algorithms.h"
#include "limiter/handle.h"

int64_t pt_breaker_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pt_breaker_init(pt_breaker *b, int threshold, int base_backoff_ms) {
    memset(b, 0, sizeof(*b));
    b->threshold = threshold;
    b->base_backoff_ms = base_backoff_ms;
    b->max_backoff_ms =
        base_backoff_ms > PT_BREAKER_MAX_BACKOFF_MS ? base_backoff_ms : PT_BREAKER_MAX_BACKOFF_MS;
    b->backoff_ms = base_backoff_ms;
    b->rng = 0x2545f4914f6cdd1dULL ^ (uint64_t)pt_breaker_clock() ^ (uint64_t)(uintptr_t)b;
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
        fprintf(stderr, "porteiro: redis answers again after %lld ms, circuit breaker closed\n",
                (long long)(pt_breaker_clock() - b->opened_at_ms));
    b->state = PT_BREAKER_CLOSED;
    b->failures = 0;
    b->backoff_ms = b->base_backoff_ms;
}

/* Opens (or reopens) for the current back-off less up to a quarter of it:
 * jitter spreads a fleet's probes and never stretches the wait past the cap. */
static void open_for_backoff(pt_breaker *b, int64_t now_ms) {
    int64_t quarter = b->backoff_ms / 4;
    int64_t jitter = quarter > 0 ? (int64_t)(next_random(b) % (uint64_t)quarter) : 0;
    b->state = PT_BREAKER_OPEN;
    b->retry_at_ms = now_ms + b->backoff_ms - jitter;
}

void pt_breaker_failure(pt_breaker *b, int64_t now_ms) {
    pt_breaker_failure_because(b, now_ms, NULL);
}

void pt_breaker_failure_because(pt_breaker *b, int64_t now_ms, const char *why) {
    b->failures++;
    if (b->threshold < 0)
        return;
    if (b->state == PT_BREAKER_HALF_OPEN) {
        /* A failed probe: wait longer next time, up to the cap. */
        b->backoff_ms =
            b->backoff_ms * 2 < b->max_backoff_ms ? b->backoff_ms * 2 : b->max_backoff_ms;
        open_for_backoff(b, now_ms);
    } else if (b->state == PT_BREAKER_CLOSED && b->failures >= b->threshold) {
        fprintf(stderr,
                "porteiro: redis failed %d times in a row (%s), circuit breaker open: probing "
                "every %d..%d ms\n",
                b->failures, why != NULL && why[0] ? why : "unknown error", b->base_backoff_ms,
                b->max_backoff_ms);
        b->opened++;
        b->opened_at_ms = now_ms;
        open_for_backoff(b, now_ms);
    }
}

bool pt_status_is_redis_failure(int status) {
    switch (status) {
        case PORTEIRO_ERR_CONNECT:
        case PORTEIRO_ERR_TIMEOUT:
        case PORTEIRO_ERR_REDIS:
        case PORTEIRO_ERR_AUTH:
        case PORTEIRO_ERR_PROTOCOL:
        case PORTEIRO_ERR_CIRCUIT_OPEN: return true;
        default: return false;
    }
}

porteiro_status pt_fallback(porteiro_t *p, const pt_call *call, porteiro_status failure,
                            porteiro_decision *d) {
    porteiro_on_error mode =
        call->on_error >= 0 ? (porteiro_on_error)call->on_error : p->opts.on_error;

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
