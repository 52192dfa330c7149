/* failover.h — the circuit breaker in front of Redis.
 *
 * Closed: every check calls Redis. After `threshold` consecutive failed round
 * trips it opens: checks do not call Redis (they cost microseconds, not the
 * budget) until the back-off has passed; then one check probes (and, Redis
 * being down, reconnects). A success closes it; a failed probe reopens it
 * with the back-off doubled, capped at PT_BREAKER_MAX_BACKOFF_MS (or the base
 * back-off if that is larger), less a random quarter so a fleet does not
 * probe in lockstep. The cap is what bounds recovery: once Redis answers
 * again, the next probe comes within one cap. Opening and closing are logged
 * once each on stderr; probes and skipped checks are not.
 * Not thread-safe by itself: the handle's mutex (or the loop thread) guards it. */
#ifndef PT_FAILOVER_H
#define PT_FAILOVER_H

#include <stdbool.h>
#include <stdint.h>

/* The back-off cap, ms: once Redis answers again, the next probe comes
 * within this (so normal decisions return within about 0.75 s). */
#define PT_BREAKER_MAX_BACKOFF_MS 750

typedef enum pt_breaker_state {
    PT_BREAKER_CLOSED = 0,
    PT_BREAKER_OPEN = 1,
    PT_BREAKER_HALF_OPEN = 2 /* one probe under way */
} pt_breaker_state;

typedef struct pt_breaker {
    int threshold; /* -1: never open */
    int base_backoff_ms;
    int max_backoff_ms;
    int failures;        /* consecutive */
    int64_t backoff_ms;  /* the current back-off */
    int64_t retry_at_ms; /* monotonic ms: when OPEN, next probe allowed */
    pt_breaker_state state;
    uint64_t rng;         /* jitter */
    uint64_t opened;      /* times it opened (metrics) */
    int64_t opened_at_ms; /* monotonic ms of the last opening (for the log) */
} pt_breaker;

void pt_breaker_init(pt_breaker *b, int threshold, int base_backoff_ms);
/* True when Redis may be called now (closed, or the moment to probe). */
bool pt_breaker_allow(pt_breaker *b, int64_t now_ms);
void pt_breaker_success(pt_breaker *b);
void pt_breaker_failure(pt_breaker *b, int64_t now_ms);
/* The same, naming the failure in the log line if this one opens it. */
void pt_breaker_failure_because(pt_breaker *b, int64_t now_ms, const char *why);
/* The monotonic clock the breaker runs on, ms. */
int64_t pt_breaker_clock(void);

/* True for a status that means "Redis failed" (fallback applies), false for
 * a caller's error (bad key, bad limit), which never falls back. */
bool pt_status_is_redis_failure(int status);

#endif
