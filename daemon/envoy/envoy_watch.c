/* envoy_watch.c — inotify on the loop (envoy_watch.h). */
#include <stddef.h>

#include "envoy_watch.h"

#include <errno.h>
#include <event2/event.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define SETTLE_MS 100
#define EVENTS                                                                                     \
    (IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB |            \
     IN_DELETE_SELF | IN_MOVE_SELF)

struct pd_watch {
    int fd;
    int wd[2];
    char folder[4096], parent[4096];
    struct event *readable, *settle;
    void (*changed)(void *arg);
    void *arg;
};

static void arm(pd_watch *w) {
    for (int i = 0; i < 2; i++)
        if (w->wd[i] >= 0)
            inotify_rm_watch(w->fd, w->wd[i]);
    w->wd[0] = inotify_add_watch(w->fd, w->folder, EVENTS);
    w->wd[1] = inotify_add_watch(w->fd, w->parent, EVENTS);
}

static void on_settled(evutil_socket_t fd, short what, void *arg) {
    pd_watch *w = arg;
    (void)fd;
    (void)what;
    w->changed(w->arg);
    arm(w);
}

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    pd_watch *w = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0)
        ; /* which file does not matter: everything is read again */
    struct timeval tv = {0, SETTLE_MS * 1000};
    event_add(w->settle, &tv);
}

pd_watch *pd_watch_new(struct event_base *base, const char *path, void (*changed)(void *arg),
                       void *arg, char *err, size_t errlen) {
    pd_watch *w = calloc(1, sizeof(*w));
    struct stat st;
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->changed = changed;
    w->arg = arg;
    w->wd[0] = w->wd[1] = -1;
    snprintf(w->folder, sizeof(w->folder), "%s", path);
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        snprintf(w->folder, sizeof(w->folder), "%s", dirname(w->folder));
    snprintf(w->parent, sizeof(w->parent), "%s", w->folder);
    snprintf(w->parent, sizeof(w->parent), "%s", dirname(w->parent));
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd >= 0)
        arm(w);
    if (w->fd < 0 || w->wd[0] < 0) {
        snprintf(err, errlen, "cannot watch %s: %s", w->folder, strerror(errno));
        pd_watch_free(w);
        return NULL;
    }
    w->readable = event_new(base, w->fd, EV_READ | EV_PERSIST, on_readable, w);
    w->settle = evtimer_new(base, on_settled, w);
    if (w->readable == NULL || w->settle == NULL || event_add(w->readable, NULL) != 0) {
        snprintf(err, errlen, "cannot watch %s: out of memory", w->folder);
        pd_watch_free(w);
        return NULL;
    }
    return w;
}

void pd_watch_free(pd_watch *w) {
    if (w == NULL)
        return;
    if (w->readable != NULL)
        event_free(w->readable);
    if (w->settle != NULL)
        event_free(w->settle);
    if (w->fd >= 0)
        close(w->fd);
    free(w);
}
