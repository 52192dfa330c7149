/* http_fields.h — what the public porteiro_http_fields_format shares with
 * its tests: the draft's quota and window of one limit, and whole seconds
 * rounded up. */
#ifndef PT_CORE_HTTP_FIELDS_H
#define PT_CORE_HTTP_FIELDS_H

#include "porteiro.h"

/* Whole seconds, rounded up, of a non-negative ms amount. */
int64_t pt_ms_to_seconds_up(int64_t ms);

/* The draft's q (units) and w (whole seconds) of one limit: L per P for
 * every algorithm; docs/daemon.md says what each algorithm's fields mean. */
void pt_quota_window(const porteiro_limit *l, int64_t *q, int64_t *w);

#endif
