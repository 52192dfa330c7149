/* envoy_watch.h — reload when envoy ratelimit's config changes, as envoy
 * ratelimit does: inotify on the config's folder (a file's folder) and on
 * the folder above it (so that a symlink swapped there, RUNTIME_ROOT's way,
 * is seen), on the event loop. Changes are gathered for 100 ms, then
 * changed() runs once; the watches are then made again (a swapped
 * symlink now leads elsewhere). */
#ifndef PD_ENVOY_WATCH_H
#define PD_ENVOY_WATCH_H

struct event_base;
typedef struct pd_watch pd_watch;

/* NULL with a message in err when inotify cannot watch path. */
pd_watch *pd_watch_new(struct event_base *base, const char *path, void (*changed)(void *arg),
                       void *arg, char *err, size_t errlen);
void pd_watch_free(pd_watch *w);

#endif
