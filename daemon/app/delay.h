/* delay.h — requests held on the worker's loop until their reservation's
 * wait is over (a policy's delay:), one timer each, no thread. A held
 * request is released when its timer fires, or at once (on the next pass
 * of the loop) when its client went away. */
#ifndef PD_DELAY_H
#define PD_DELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

/* Called once per held request: abandoned is true when its client went
 * away (pd_delay_abandon) or the worker shuts down; held_us is how long it
 * was held. */
typedef void pd_release_fn(void *job, bool abandoned, int64_t held_us);

typedef struct pd_delays pd_delays;

pd_delays *pd_delays_new(struct event_base *base, pd_release_fn *release);
/* Releases every held request first (abandoned), then frees. */
void pd_delays_free(pd_delays *ds);

/* Holds job for wait_ms; conn identifies its connection for
 * pd_delay_abandon. Returns 0, or -1 when out of memory (not held). */
int pd_delay_hold(pd_delays *ds, void *job, const void *conn, int64_t wait_ms);

/* The connection conn closed: its held request, if any, is released on the
 * next pass of the loop (abandoned) and returned; NULL if none. */
void *pd_delay_abandon(pd_delays *ds, const void *conn);

/* Every held request released now (abandoned): a worker shutting down. */
void pd_delay_flush(pd_delays *ds);

/* Requests held now by this worker. */
size_t pd_delay_count(const pd_delays *ds);

#endif
