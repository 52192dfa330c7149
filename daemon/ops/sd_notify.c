/* sd_notify.c — the service manager's notification socket and the watchdog
 * (sd_notify.h). The protocol: one datagram per message, text of
 * newline-separated assignments, sent to the AF_UNIX address in
 * $NOTIFY_SOCKET; a leading '@' names an abstract socket (a NUL byte first,
 * and the address length counts only the name). */
#include "sd_notify.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_addrlen;
static uint64_t watchdog_usec;

static uint64_t monotonic_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A decimal number of the whole string, or 0. */
static uint64_t env_number(const char *name) {
    const char *s = getenv(name);
    if (s == NULL || *s < '0' || *s > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0' ? (uint64_t)v : 0;
}

bool pd_notify_init(void) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (notify_fd >= 0) {
        close(notify_fd);
        notify_fd = -1;
    }
    watchdog_usec = 0;
    if (path == NULL || (path[0] != '/' && path[0] != '@'))
        return false; /* unset, or a kind of address (vsock:) we do not speak */
    size_t n = strlen(path);
    if (n < 2 || n > sizeof(notify_addr.sun_path) - 1) {
        pd_log(PD_LOG_WARN, "NOTIFY_SOCKET: \"%s\" is not a usable socket address", path);
        return false;
    }
    memset(&notify_addr, 0, sizeof(notify_addr));
    notify_addr.sun_family = AF_UNIX;
    memcpy(notify_addr.sun_path, path, n);
    if (path[0] == '@')
        notify_addr.sun_path[0] = '\0'; /* abstract: no terminating NUL counted */
    notify_addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (notify_fd < 0) {
        pd_log(PD_LOG_WARN, "NOTIFY_SOCKET: cannot open a socket: %s", strerror(errno));
        return false;
    }
    /* The watchdog is ours unless WATCHDOG_PID names another process. */
    uint64_t pid = env_number("WATCHDOG_PID");
    if (pid == 0 || pid == (uint64_t)getpid())
        watchdog_usec = env_number("WATCHDOG_USEC");
    return true;
}

int pd_notify(const char *fmt, ...) {
    if (notify_fd < 0)
        return -1;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    size_t len = (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
    ssize_t sent = sendto(notify_fd, msg, len, MSG_NOSIGNAL, (const struct sockaddr *)&notify_addr,
                          notify_addrlen);
    return sent == (ssize_t)len ? 0 : -1;
}

int pd_notify_reloading(void) {
    return pd_notify("RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)monotonic_usec());
}

uint64_t pd_notify_watchdog_usec(void) {
    return watchdog_usec;
}

/* ---- the watchdog ---------------------------------------------------- */

typedef struct pd_watchdog_loop {
    pd_watchdog *w;
    struct event *beat;
    _Atomic uint64_t alive_usec; /* the last time this loop ran its timer */
} pd_watchdog_loop;

struct pd_watchdog {
    uint64_t interval_usec;
    struct event *ping; /* on the main loop */
    int nloops;
    bool stuck_logged;
    atomic_bool stopping;
    pd_watchdog_loop loops[];
};

static struct timeval usec_tv(uint64_t us) {
    struct timeval tv = {(time_t)(us / 1000000u), (suseconds_t)(us % 1000000u)};
    return tv;
}

static void on_beat(evutil_socket_t fd, short what, void *arg) {
    pd_watchdog_loop *l = arg;
    (void)fd;
    (void)what;
    atomic_store(&l->alive_usec, monotonic_usec());
}

/* Every half interval: WATCHDOG=1 if every loop beat within the last
 * half interval plus slack (its timer runs every quarter). */
static void on_ping(evutil_socket_t fd, short what, void *arg) {
    pd_watchdog *w = arg;
    (void)fd;
    (void)what;
    uint64_t now = monotonic_usec(), late = w->interval_usec * 3 / 4;
    if (atomic_load(&w->stopping))
        return;
    for (int i = 0; i < w->nloops; i++) {
        uint64_t alive = atomic_load(&w->loops[i].alive_usec);
        if (now - alive > late) {
            if (!w->stuck_logged)
                pd_log(PD_LOG_ERROR,
                       "watchdog: worker %d's loop has not run for %llu ms; "
                       "no ping, so the service manager restarts porteirod",
                       i, (unsigned long long)((now - alive) / 1000u));
            w->stuck_logged = true;
            return;
        }
    }
    pd_notify("WATCHDOG=1");
}

pd_watchdog *pd_watchdog_new(struct event_base *main_base, int nloops) {
    if (watchdog_usec == 0 || nloops <= 0)
        return NULL;
    pd_watchdog *w = calloc(1, sizeof(*w) + (size_t)nloops * sizeof(w->loops[0]));
    if (w == NULL) {
        pd_log(PD_LOG_ERROR, "watchdog: out of memory");
        return NULL;
    }
    w->interval_usec = watchdog_usec;
    w->nloops = nloops;
    atomic_init(&w->stopping, false);
    uint64_t now = monotonic_usec();
    for (int i = 0; i < nloops; i++) {
        w->loops[i].w = w;
        atomic_init(&w->loops[i].alive_usec, now);
    }
    struct timeval tv = usec_tv(watchdog_usec / 2);
    w->ping = event_new(main_base, -1, EV_PERSIST, on_ping, w);
    if (w->ping == NULL || event_add(w->ping, &tv) != 0) {
        pd_log(PD_LOG_ERROR, "watchdog: cannot start its timer");
        pd_watchdog_free(w);
        return NULL;
    }
    return w;
}

int pd_watchdog_attach(pd_watchdog *w, int i, struct event_base *base) {
    if (w == NULL || i < 0 || i >= w->nloops)
        return -1;
    pd_watchdog_loop *l = &w->loops[i];
    struct timeval tv = usec_tv(w->interval_usec / 4);
    l->beat = event_new(base, -1, EV_PERSIST, on_beat, l);
    return l->beat != NULL && event_add(l->beat, &tv) == 0 ? 0 : -1;
}

void pd_watchdog_stopping(pd_watchdog *w) {
    if (w != NULL)
        atomic_store(&w->stopping, true);
}

void pd_watchdog_free(pd_watchdog *w) {
    if (w == NULL)
        return;
    for (int i = 0; i < w->nloops; i++)
        if (w->loops[i].beat != NULL)
            event_free(w->loops[i].beat);
    if (w->ping != NULL)
        event_free(w->ping);
    free(w);
}
