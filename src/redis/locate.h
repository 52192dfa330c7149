/* locate.h — how a connection to one node finds that node when its URL
 * does not say where it is: a master watched by Redis Sentinel
 * (url->kind PT_URL_SENTINEL; url->host/port hold the master last found).
 *
 * The connections (conn.c, async_conn.c) know nothing of Sentinel: the
 * layer above (topology/, pt_sentinel_locator) fills this table and hangs
 * it on the URL (pt_redis_url.locate); the connections call through it.
 * A Sentinel URL without a locator makes no connection (pt_redis_new and
 * pt_aconn_new return NULL). */
#ifndef PT_REDIS_LOCATE_H
#define PT_REDIS_LOCATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "porteiro.h"
#include "redis/url.h"

typedef struct pt_locator {
    /* Where the master is now, asked before deadline_us (CLOCK_MONOTONIC,
     * us); blocking. May reorder url->nodes (the one that answered first).
     * On PORTEIRO_OK host and *port hold its address; otherwise errbuf says
     * why (PORTEIRO_ERR_CONNECT: nobody answered, or no such master). */
    porteiro_status (*master)(pt_redis_url *url, int64_t deadline_us, char *host, size_t hostlen,
                              int *port, char *errbuf, size_t errlen);
    /* One watch per connection for announced moves (NULL on ENOMEM), and
     * its end (NULL is fine). */
    void *(*watch_new)(void);
    void (*watch_free)(void *watch);
    /* Never waits: true when the master was announced to have moved since
     * the last call; host and *port then hold the new address. */
    bool (*watch_poll)(void *watch, const pt_redis_url *url, char *host, size_t hostlen, int *port);
} pt_locator;

#endif
