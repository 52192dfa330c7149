/* sentinel_watch.h — the sentinels' +switch-master announcements, read
 * without ever waiting: a connection that follows a Sentinel-watched master
 * moves to the promoted replica as soon as the sentinels announce it,
 * before any check fails on the old master (a planned failover demotes the
 * old master to a replica that answers READONLY; a crash answers nothing).
 *
 * One subscription to one sentinel (the first of url->nodes, which
 * pt_sentinel_master keeps in front while it answers), made without
 * blocking: a non-blocking connect, AUTH and SUBSCRIBE written when the
 * socket allows. A lost subscription is made again, at most once a second.
 * Polling costs one poll(2) at most every PT_SENTINEL_WATCH_EVERY_US. Not
 * thread-safe: one per connection. */
#ifndef PT_TOPOLOGY_SENTINEL_WATCH_H
#define PT_TOPOLOGY_SENTINEL_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "redis/url.h"

#define PT_SENTINEL_WATCH_EVERY_US 20000

typedef struct pt_sentinel_watch pt_sentinel_watch;

pt_sentinel_watch *pt_sentinel_watch_new(void);
void pt_sentinel_watch_free(pt_sentinel_watch *w);

/* Reads what the sentinel announced since the last call (subscribing first
 * if need be). True when it announced that url->master moved: host and
 * *port then hold the new master's address. */
bool pt_sentinel_watch_poll(pt_sentinel_watch *w, const pt_redis_url *url, char *host,
                            size_t hostlen, int *port);

/* Parses one pub/sub message; true when it is a +switch-master for master
 * ("<name> <old-ip> <old-port> <new-ip> <new-port>"). */
bool pt_sentinel_switch_parse(const char *msg, size_t len, const char *master, char *host,
                              size_t hostlen, int *port);

#endif
