/* alink.c — one socket to one Redis node on the event loop (alink.h). */
#include "redis/alink.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "redis/loop.h"
#include "redis/wire.h"

struct pt_alink {
    int fd;
    pt_io *io;
    bool up;              /* connected: the output buffer may be written */
    bool down;            /* on_down was told: nothing more is read */
    int busy;             /* inside a callback: a free waits for the unwind */
    bool freed;           /* pt_alink_free was called while busy */
    char failed[96];      /* a write failure, told on the loop (not inside flush) */
    pt_buf out;
    pt_wire_reader *in;
    pt_alink_events ev;
    void *arg;
};

/* ---- the byte stream: a plain socket (TLS goes here) ---- */

#define STREAM_AGAIN (-2) /* the socket is not ready: wait for the loop */

/* Bytes read: > 0, 0 at the end of the stream, STREAM_AGAIN, or -1 with
 * errno. */
static ssize_t stream_read(pt_alink *l, char *buf, size_t len) {
    for (;;) {
        ssize_t n = read(l->fd, buf, len);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? STREAM_AGAIN : -1;
    }
}

/* Bytes written: > 0, STREAM_AGAIN, or -1 with errno. MSG_NOSIGNAL: a dead
 * peer never raises SIGPIPE in the host. */
static ssize_t stream_write(pt_alink *l, const char *buf, size_t len) {
    for (;;) {
        ssize_t n = send(l->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? STREAM_AGAIN : -1;
    }
}

/* The socket became writable while connecting: 1 when the stream is up, 0
 * to wait more, -1 with the reason in why. */
static int stream_connected(pt_alink *l, char *why, size_t whylen) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == 0)
        return 1;
    snprintf(why, whylen, "redis: connect: %s", strerror(err));
    return -1;
}

/* ---- events ---- */

/* Tells the owner the link is gone, once. */
static void go_down(pt_alink *l, const char *why) {
    if (l->down)
        return;
    l->down = true;
    pt_io_want_write(l->io, false);
    l->ev.on_down(l->arg, why);
}

/* Writes the output buffer as far as the socket takes it. */
static void write_out(pt_alink *l) {
    while (l->out.len > l->out.off) {
        ssize_t n = stream_write(l, l->out.data + l->out.off, l->out.len - l->out.off);
        if (n == STREAM_AGAIN)
            break;
        if (n < 0) {
            snprintf(l->failed, sizeof(l->failed), "redis: send: %s", strerror(errno));
            break;
        }
        pt_buf_consume(&l->out, (size_t)n);
    }
    /* Wait for room; or, after a failure, be woken to tell it. */
    pt_io_want_write(l->io, l->out.len > l->out.off || l->failed[0] != '\0');
}

/* Reads what the socket has and hands out every complete reply. */
static void read_in(pt_alink *l) {
    char buf[16384], why[160];
    for (;;) {
        ssize_t n = stream_read(l, buf, sizeof(buf));
        if (n == STREAM_AGAIN)
            return;
        if (n <= 0) {
            if (n == 0)
                snprintf(why, sizeof(why), "redis: connection closed by the server");
            else
                snprintf(why, sizeof(why), "redis: read: %s", strerror(errno));
            go_down(l, why);
            return;
        }
        if (pt_wire_reader_feed(l->in, buf, (size_t)n) != 0) {
            go_down(l, "out of memory");
            return;
        }
        const redisReply *reply;
        int got;
        while ((got = pt_wire_reader_next(l->in, (redisReply **)&reply, why, sizeof(why))) == 1) {
            l->ev.on_reply(l->arg, reply);
            if (l->freed || l->down)
                return;
        }
        if (got < 0) {
            go_down(l, why);
            return;
        }
        if ((size_t)n < sizeof(buf))
            return; /* drained: the next read would say EAGAIN */
    }
}

static void on_io(void *arg, bool readable, bool writable) {
    pt_alink *l = arg;
    char why[160];
    l->busy++;
    if (!l->up && !l->down && writable) {
        int st = stream_connected(l, why, sizeof(why));
        if (st < 0)
            go_down(l, why);
        l->up = st > 0;
    }
    if (l->up && !l->down && !l->freed && readable)
        read_in(l);
    /* Replies may have sent more (EVAL after NOSCRIPT): one write for all. */
    if (l->up && !l->down && !l->freed)
        write_out(l);
    if (l->failed[0] != '\0' && !l->freed)
        go_down(l, l->failed);
    if (--l->busy == 0 && l->freed)
        pt_alink_free(l);
}

/* ---- the link ---- */

static int open_socket(const pt_alink_target *t, char *errbuf, size_t errlen) {
    struct sockaddr_storage sa;
    socklen_t salen;
    memset(&sa, 0, sizeof(sa));
    if (t->is_unix) {
        struct sockaddr_un *un = (struct sockaddr_un *)&sa;
        if (strlen(t->addr) >= sizeof(un->sun_path)) {
            snprintf(errbuf, errlen, "redis: unix socket path too long");
            return -1;
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, t->addr, strlen(t->addr) + 1);
        salen = sizeof(*un);
    } else {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&sa;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
        if (inet_pton(AF_INET, t->addr, &in4->sin_addr) == 1) {
            in4->sin_family = AF_INET;
            in4->sin_port = htons((uint16_t)t->port);
            salen = sizeof(*in4);
        } else if (inet_pton(AF_INET6, t->addr, &in6->sin6_addr) == 1) {
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons((uint16_t)t->port);
            salen = sizeof(*in6);
        } else {
            snprintf(errbuf, errlen, "redis: not a numeric address: %s", t->addr);
            return -1;
        }
    }
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(errbuf, errlen, "redis: socket: %s", strerror(errno));
        return -1;
    }
    if (!t->is_unix) {
        int one = 1; /* replies are small and awaited: no Nagle delay */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (connect(fd, (struct sockaddr *)&sa, salen) != 0 && errno != EINPROGRESS) {
        snprintf(errbuf, errlen, "redis: connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

pt_alink *pt_alink_new(struct event_base *base, const pt_alink_target *t,
                       const pt_alink_events *ev, void *arg, char *errbuf, size_t errlen) {
    pt_alink *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    l->ev = *ev;
    l->arg = arg;
    l->fd = open_socket(t, errbuf, errlen);
    if (l->fd < 0) {
        free(l);
        return NULL;
    }
    l->in = pt_wire_reader_new();
    l->io = l->in != NULL ? pt_io_new(base, l->fd, on_io, l) : NULL;
    if (l->io == NULL) {
        snprintf(errbuf, errlen, "out of memory");
        pt_alink_free(l);
        return NULL;
    }
    /* The connect's end shows as the socket becoming writable. */
    pt_io_want_write(l->io, true);
    return l;
}

void pt_alink_free(pt_alink *l) {
    if (l == NULL)
        return;
    if (l->busy > 0) { /* inside one of its callbacks: freed on the way out */
        l->freed = true;
        l->down = true;
        return;
    }
    pt_io_free(l->io);
    if (l->fd >= 0)
        close(l->fd);
    pt_wire_reader_free(l->in);
    pt_buf_free(&l->out);
    free(l);
}

int pt_alink_command(pt_alink *l, int argc, const char *const *argv, const size_t *argvlen) {
    return pt_buf_command(&l->out, argc, argv, argvlen);
}

void pt_alink_flush(pt_alink *l) {
    if (l->up && !l->down && l->busy == 0)
        write_out(l); /* inside on_io the write comes on the way out */
}

bool pt_alink_up(const pt_alink *l) { return l->up; }
