/* rls_fake.h — test support: a stand-in for the decision side of
 * envoy_rls.h (pd_rls_should_rate_limit, pd_rls_health), linked into test
 * binaries only, never into porteirod. It lets the gRPC face be tested on its
 * own, in process:
 *   - a counter per (domain, first entry) with the descriptor's limit
 *     override (default 3), all-or-nothing over the descriptors;
 *   - hits: the descriptor's hits_addend, else the request's, else 1;
 *   - status name "key=value" of the first entry (each cut at 40 bytes),
 *     unit the override's (default MINUTE), reset 1500 ms;
 *   - domain "slow": answered slow_ms later, from a timer;
 *   - domain "headers": two response headers;
 *   - empty domain, no descriptors: INVALID_ARGUMENT;
 * and pd_app_count_refused, the one call the server makes into the app.
 * Everything runs on the loop given to rls_fake_init. */
#ifndef TEST_RLS_FAKE_H
#define TEST_RLS_FAKE_H

#include <stdbool.h>

struct event_base;

void rls_fake_init(struct event_base *base, int slow_ms);
/* What pd_rls_health says (thread-safe). */
void rls_fake_set_serving(bool serving);
/* Decisions made so far (thread-safe). */
long rls_fake_decisions(void);
/* Connections the server refused at its cap (pd_app_count_refused). */
long rls_fake_refused(void);

#endif
