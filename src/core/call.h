/* call.h — a check request validated and made ready for a backend. */
#ifndef PT_CALL_H
#define PT_CALL_H

#include "porteiro.h"

#define PT_MAX_PREFIX 128
/* prefix ":{" key "}:" descriptor: the descriptor names the algorithm and
 * the period (never L or B), so a changed limit keeps its state; a second
 * limit of one check with the same algorithm and period adds ":2" (and so
 * on), so that it keeps a state of its own. */
#define PT_MAX_FULL_KEY (PT_MAX_PREFIX + PORTEIRO_MAX_KEY_LEN + 80)
/* An injected clock beyond 2^50 ms (the year 37 000) would overflow the
 * window and TAT arithmetic in C and leave the exact range of Lua doubles. */
#define PT_MAX_NOW_MS ((int64_t)1 << 50)

typedef struct pt_call {
    size_t nlimits;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS]; /* normalized: burst set */
    int64_t cost;
    int64_t now_ms; /* PORTEIRO_NOW or injected */
    int64_t max_wait_ms; /* > 0: a reservation may wait this long (0: none) */
    int on_error;   /* a porteiro_on_error overriding the handle's, or -1 */
    bool refund;    /* give cost units back instead of taking them */
    bool shadow;    /* a policy in shadow mode: a denial is reported, not enforced */
    const char *keys[PORTEIRO_MAX_LIMITS];
    size_t key_lens[PORTEIRO_MAX_LIMITS];
    char buf[PORTEIRO_MAX_LIMITS * PT_MAX_FULL_KEY];
} pt_call;

/* Validates req and builds the Redis keys under prefix. On error writes a
 * message into errbuf. need_cost_bounds: cost must be <= 10^9. */
porteiro_status pt_call_prepare(pt_call *call, const char *prefix, size_t prefix_len,
                                const porteiro_limit *limits, size_t nlimits, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, char *errbuf,
                                size_t errlen);

/* Sets the longest wait a check accepts (porteiro_request.max_wait_ms),
 * after pt_call_prepare: 0..PORTEIRO_MAX_WAIT_MS, and no concurrency
 * limit (their leases are taken by porteiro_acquire). */
porteiro_status pt_call_set_max_wait(pt_call *call, int64_t max_wait_ms, char *errbuf,
                                     size_t errlen);

/* Copies a prepared call (its keys point into its own buffer). */
void pt_call_copy(pt_call *dst, const pt_call *src);

/* The key of a client's leases (prefix:{key}:cc) into out, which holds
 * PT_MAX_FULL_KEY bytes. Fails (message in errbuf) on a bad key. */
porteiro_status pt_lease_key(char *out, size_t *out_len, const char *prefix, size_t prefix_len,
                             const void *key, size_t key_len, char *errbuf, size_t errlen);

#endif
