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
#include "redis/tls.h"
#include "redis/wire.h"

struct pt_alink {
    int fd;
    pt_io *io;
    pt_sock sock;       /* plain or TLS, once the TCP connect is done */
    struct pt_tls *tls; /* borrowed */
    char host[256];     /* the name the certificate must carry */
    bool connected;     /* the TCP connect is done (the handshake may not be) */
    bool up;            /* connected: the output buffer may be written */
    bool got_bytes;     /* a read returned bytes */
    bool is_unix;
    bool down;        /* on_down was told: nothing more is read */
    int busy;         /* inside a callback: a free waits for the unwind */
    bool freed;       /* pt_alink_free was called while busy */
    char failed[160]; /* a write failure, told on the loop (not inside flush) */
    pt_buf out;
    pt_wire_reader *in;
    pt_alink_events ev;
    void *arg;
};

/* ---- the byte stream: a pt_sock, plain or TLS (tls.h) ---- */

#define STREAM_AGAIN (-2) /* the socket is not ready: wait for the loop */

/* Bytes read: > 0, STREAM_AGAIN, or -1 with the reason in why (the end of
 * the stream included). */
static ssize_t stream_read(pt_alink *l, char *buf, size_t len, char *why, size_t whylen) {
    ssize_t n = pt_sock_read(&l->sock, buf, len, why, whylen);
    if (n == PT_SOCK_WANT_READ || n == PT_SOCK_WANT_WRITE)
        return STREAM_AGAIN;
    if (n > 0 || n == PT_SOCK_ERROR)
        return n > 0 ? n : -1;
    snprintf(why, whylen, "redis: the server closed the connection");
    return -1;
}

/* Bytes written: > 0, STREAM_AGAIN, or -1 with the reason in why. Never
 * SIGPIPE (pt_sock sends with MSG_NOSIGNAL). */
static ssize_t stream_write(pt_alink *l, const char *buf, size_t len, char *why, size_t whylen) {
    ssize_t n = pt_sock_write(&l->sock, buf, len, why, whylen);
    if (n == PT_SOCK_WANT_READ || n == PT_SOCK_WANT_WRITE || n == 0)
        return STREAM_AGAIN;
    return n > 0 ? n : -1;
}

/* The TCP connect is done (the socket became writable): the stream is
 * made, plain or TLS. -1 with the reason in why. */
static int stream_connected(pt_alink *l, char *why, size_t whylen) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        snprintf(why, whylen, "redis: connect: %s", strerror(err));
        return -1;
    }
    return pt_sock_init(&l->sock, l->fd, l->tls, l->host, why, whylen) == PT_SOCK_DONE ? 0 : -1;
}

/* One step of the TLS handshake: 1 done, 0 again later (the io's write
 * interest set as the step needs), -1 with the reason in why. */
static int stream_handshake(pt_alink *l, char *why, size_t whylen) {
    int st = pt_sock_handshake(&l->sock, why, whylen);
    if (st == PT_SOCK_DONE)
        return 1;
    if (st == PT_SOCK_WANT_READ || st == PT_SOCK_WANT_WRITE) {
        pt_io_want_write(l->io, st == PT_SOCK_WANT_WRITE);
        return 0;
    }
    return -1;
}

/* ---- events ---- */

/* Tells the owner the link is gone, once. A plain connection closed
 * before any byte came back may have reached a TLS port (which drops
 * plain bytes without a word): the message says so. */
static void go_down(pt_alink *l, const char *why) {
    char msg[240];
    if (l->down)
        return;
    l->down = true;
    pt_io_want_write(l->io, false);
    if (l->tls == NULL && l->up && !l->got_bytes && !l->is_unix)
        snprintf(msg, sizeof(msg),
                 "%.160s, before any answer (a TLS port? then use rediss:// or "
                 "--tls)",
                 why);
    else
        snprintf(msg, sizeof(msg), "%s", why);
    l->ev.on_down(l->arg, msg);
}

/* Writes the output buffer as far as the socket takes it. */
static void write_out(pt_alink *l) {
    while (l->out.len > l->out.off) {
        ssize_t n = stream_write(l, l->out.data + l->out.off, l->out.len - l->out.off, l->failed,
                                 sizeof(l->failed));
        if (n == STREAM_AGAIN)
            break;
        if (n < 0) {
            if (l->failed[0] == '\0')
                snprintf(l->failed, sizeof(l->failed), "redis: send failed");
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
        why[0] = '\0';
        ssize_t n = stream_read(l, buf, sizeof(buf), why, sizeof(why));
        if (n == STREAM_AGAIN)
            return;
        if (n < 0) {
            go_down(l, why[0] != '\0' ? why : "redis: read failed");
            return;
        }
        /* A plain connection to a TLS port: its first bytes are a TLS
         * record (an alert), not a reply. */
        if (!l->got_bytes && l->tls == NULL && pt_tls_record_byte((unsigned char)buf[0])) {
            go_down(l, "redis: the server speaks TLS (use a rediss:// URL or --tls)");
            return;
        }
        l->got_bytes = true;
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
        /* Drained (the next read would say EAGAIN), unless TLS holds
         * decrypted bytes the fd will not announce. */
        if ((size_t)n < sizeof(buf) && !pt_sock_pending(&l->sock))
            return;
    }
}

static void on_io(void *arg, bool readable, bool writable) {
    pt_alink *l = arg;
    char why[160];
    l->busy++;
    if (!l->connected && !l->down && writable) {
        if (stream_connected(l, why, sizeof(why)) != 0)
            go_down(l, why);
        l->connected = true;
    }
    if (l->connected && !l->up && !l->down) {
        int st = stream_handshake(l, why, sizeof(why));
        if (st < 0)
            go_down(l, why);
        l->up = st > 0;
        readable = false; /* the handshake took what there was */
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

pt_alink *pt_alink_new(const pt_loop *loop, const pt_alink_target *t, const pt_alink_events *ev,
                       void *arg, char *errbuf, size_t errlen) {
    pt_alink *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    l->ev = *ev;
    l->arg = arg;
    l->tls = t->tls;
    l->is_unix = t->is_unix;
    snprintf(l->host, sizeof(l->host), "%s", t->host != NULL ? t->host : t->addr);
    l->fd = open_socket(t, errbuf, errlen);
    if (l->fd < 0) {
        free(l);
        return NULL;
    }
    l->in = pt_wire_reader_new();
    l->io = l->in != NULL ? pt_io_new(loop, l->fd, on_io, l) : NULL;
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
    pt_sock_close(&l->sock);
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

void pt_alink_poll(pt_alink *l) {
    if (l->up && !l->down && l->busy == 0)
        on_io(l, true, false);
}

bool pt_alink_up(const pt_alink *l) {
    return l->up;
}

bool pt_alink_in_handshake(const pt_alink *l) {
    return l->connected && !l->up;
}
