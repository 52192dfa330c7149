/* sentinel.h — asking Redis Sentinels where a master is.
 *
 * The sentinels are asked in order; one that fails (no connection, an
 * error, no answer in time) moves to the back of the list, so the next
 * question starts with one that answered. Blocking, with a deadline. */
#ifndef PT_TOPOLOGY_SENTINEL_H
#define PT_TOPOLOGY_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#include "porteiro.h"
#include "redis/locate.h"
#include "redis/url.h"

/* SENTINEL get-master-addr-by-name url->master, asked of url->nodes in
 * order (reordered in place as above). On PORTEIRO_OK, host and *port hold
 * the master's address. A name no sentinel knows is PORTEIRO_ERR_CONNECT
 * with "no master named ..." in errbuf; no sentinel reachable, the same
 * status with "no sentinel answered". */
porteiro_status pt_sentinel_master(pt_redis_url *url, int64_t deadline_us, char *host,
                                   size_t hostlen, int *port, char *errbuf, size_t errlen);

/* The connections' way to a Sentinel-watched master (redis/locate.h):
 * pt_sentinel_master and sentinel_watch.h. router.c puts it on the URL. */
extern const pt_locator pt_sentinel_locator;

#endif
