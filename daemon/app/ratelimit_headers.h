/* ratelimit_headers.h — the IETF RateLimit-Policy / RateLimit fields and
 * Retry-After for one decision:
 *   RateLimit-Policy: "api";q=100;w=60      (quota L per window P, in seconds)
 *   RateLimit: "api";r=42;t=17              (remaining, seconds to reset)
 *   Retry-After: 3                          (denials only, rounded up)
 * A policy with several limits lists each in RateLimit-Policy as "api.0",
 * "api.1"...; RateLimit names the one that limits now (the denying one, or
 * the one with the least remaining). */
#ifndef PD_RATELIMIT_HEADERS_H
#define PD_RATELIMIT_HEADERS_H

#include "porteiro.h"

typedef struct pd_rl_headers {
    char policy[1280];
    char ratelimit[384];
    char retry_after[24]; /* "" when there is none to send */
} pd_rl_headers;

/* Whole seconds, rounded up, of a non-negative ms amount. */
int64_t pd_ms_to_seconds_up(int64_t ms);

/* The draft's q (units) and w (whole seconds) of one limit: L per P for
 * every algorithm; docs/daemon.md says what each algorithm's fields mean. */
void pd_quota_window(const porteiro_limit *l, int64_t *q, int64_t *w);

void pd_ratelimit_headers(const char *policy_name, const porteiro_limit *limits, size_t nlimits,
                          const porteiro_decision *d, pd_rl_headers *out);

#endif
