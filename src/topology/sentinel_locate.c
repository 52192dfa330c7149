/* sentinel_locate.c — Redis Sentinel as the locator of a one-node
 * connection (redis/locate.h): where the master is (sentinel.c) and its
 * announced moves (sentinel_watch.c). The connections below call these
 * through the table; they never name the Sentinel themselves. */
#include "topology/sentinel.h"

#include "topology/sentinel_watch.h"

static void *watch_new(void) {
    return pt_sentinel_watch_new();
}
static void watch_free(void *w) {
    pt_sentinel_watch_free(w);
}
static bool watch_poll(void *w, const pt_redis_url *url, char *host, size_t hostlen, int *port) {
    return pt_sentinel_watch_poll(w, url, host, hostlen, port);
}

const pt_locator pt_sentinel_locator = {
    .master = pt_sentinel_master,
    .watch_new = watch_new,
    .watch_free = watch_free,
    .watch_poll = watch_poll,
};
