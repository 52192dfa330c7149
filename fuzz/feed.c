/* feed.c — a socket fed from memory (feed.h). */
#include "feed.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The wrapped calls (-Wl,--wrap=...): __real_* are libc's (or ASan's). */
ssize_t __real_recv(int fd, void *buf, size_t len, int flags);
ssize_t __real_send(int fd, const void *buf, size_t len, int flags);
int __real_connect(int fd, const struct sockaddr *sa, socklen_t salen);
int __real_close(int fd);
int __real_shutdown(int fd, int how);
ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags);
int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t salen);
int __wrap_close(int fd);
int __wrap_shutdown(int fd, int how);

fz_feed_state fz_feed = {.fd = -1};

void fz_feed_start(int fd, const uint8_t *data, size_t len, char *sent, size_t sent_cap) {
    const char *path = fz_feed.connect_path;
    fz_feed = (fz_feed_state){.fd = fd,
                              .data = data,
                              .len = len,
                              .sent = sent,
                              .sent_cap = sent_cap,
                              .connect_path = path};
}

void fz_feed_let(size_t n) {
    size_t left = fz_feed.len - fz_feed.off - fz_feed.avail;
    fz_feed.avail += n < left ? n : left;
}

void fz_feed_stop(void) {
    fz_feed.fd = -1;
}

static bool fed(int fd) {
    return fd >= 0 && fd == fz_feed.fd;
}

ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags) {
    if (!fed(fd))
        return __real_recv(fd, buf, len, flags);
    size_t n = fz_feed.avail < len ? fz_feed.avail : len;
    if (n == 0) {
        if (fz_feed.ended || fz_feed.gone)
            return 0;
        errno = EAGAIN;
        return -1;
    }
    memcpy(buf, fz_feed.data + fz_feed.off, n);
    if ((flags & MSG_PEEK) == 0) {
        fz_feed.off += n;
        fz_feed.avail -= n;
    }
    return (ssize_t)n;
}

ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags) {
    if (!fed(fd))
        return __real_send(fd, buf, len, flags);
    if (fz_feed.gone) {
        errno = EPIPE;
        return -1;
    }
    size_t keep = len < fz_feed.sent_cap - fz_feed.nsent ? len : fz_feed.sent_cap - fz_feed.nsent;
    if (keep > 0)
        memcpy(fz_feed.sent + fz_feed.nsent, buf, keep);
    fz_feed.nsent += keep;
    return (ssize_t)len;
}

int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t salen) {
    int rc = __real_connect(fd, sa, salen);
    if (fz_feed.connect_path != NULL && sa->sa_family == AF_UNIX &&
        strcmp(((const struct sockaddr_un *)sa)->sun_path, fz_feed.connect_path) == 0)
        fz_feed.fd = fd; /* a reconnect makes a new one */
    return rc;
}

int __wrap_close(int fd) {
    if (fed(fd)) {
        fz_feed.closed = true;
        fz_feed.fd = -1; /* the number may be given out again */
    }
    return __real_close(fd);
}

int __wrap_shutdown(int fd, int how) {
    if (fed(fd) && how != SHUT_RD)
        fz_feed.closed = true;
    return __real_shutdown(fd, how);
}
