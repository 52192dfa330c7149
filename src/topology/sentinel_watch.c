/* sentinel_watch.c — +switch-master, read without waiting (sentinel_watch.h). */
#include "topology/sentinel_watch.h"
#include "redis/command.h"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "redis/tls.h"

#define RESUBSCRIBE_EVERY_US 1000000

struct pt_sentinel_watch {
    redisContext *ctx; /* NULL: not subscribed */
    pt_sock sock;      /* the bytes: plain, or TLS (the url's tls_conf) */
    bool sent;         /* AUTH and SUBSCRIBE are out */
    int64_t polled_us; /* the last look */
    int64_t tried_us;  /* the last subscription attempt */
};

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

pt_sentinel_watch *pt_sentinel_watch_new(void) {
    return calloc(1, sizeof(pt_sentinel_watch));
}

static void unsubscribe(pt_sentinel_watch *w) {
    pt_sock_close(&w->sock);
    if (w->ctx != NULL)
        redisFree(w->ctx);
    w->ctx = NULL;
}

void pt_sentinel_watch_free(pt_sentinel_watch *w) {
    if (w == NULL)
        return;
    unsubscribe(w);
    free(w);
}

/* Starts a non-blocking connection to the first sentinel with AUTH and
 * SUBSCRIBE queued; they leave when the socket is writable. */
static void subscribe(pt_sentinel_watch *w, const pt_redis_url *url, int64_t now) {
    if (url->nnodes == 0 || now - w->tried_us < RESUBSCRIBE_EVERY_US)
        return;
    w->tried_us = now;
    char err[8];
    w->ctx = redisConnectNonBlock(url->nodes[0].host, url->nodes[0].port);
    if (w->ctx != NULL)
        pt_reader_bound(w->ctx->reader);
    if (w->ctx == NULL || w->ctx->err ||
        pt_sock_init(&w->sock, w->ctx->fd, url->tls_conf, url->nodes[0].host, err, sizeof(err)) !=
            PT_SOCK_DONE) {
        unsubscribe(w);
        return;
    }
    if (url->sentinel_password[0] != '\0')
        redisAppendCommand(w->ctx, "AUTH %s", url->sentinel_password);
    redisAppendCommand(w->ctx, "SUBSCRIBE +switch-master");
    w->sent = false;
}

/* The TLS handshake's next step, then what is queued, as far as the
 * socket allows now (the rest at the next look); false when the connection
 * failed. The stream never raises SIGPIPE. */
static bool send_queued(pt_sentinel_watch *w) {
    char err[8];
    ssize_t n = pt_sock_handshake(&w->sock, err, sizeof(err));
    if (n != PT_SOCK_DONE)
        return n != PT_SOCK_ERROR;
    while (sdslen(w->ctx->obuf) > 0) {
        n = pt_sock_write(&w->sock, w->ctx->obuf, sdslen(w->ctx->obuf), err, sizeof(err));
        if (n > 0) {
            sdsrange(w->ctx->obuf, (int)n, -1);
            continue;
        }
        return n != PT_SOCK_ERROR;
    }
    w->sent = true;
    return true;
}

/* Everything readable now into the reader; false when the connection is
 * closed or failed. */
static bool read_available(pt_sentinel_watch *w) {
    char buf[4096], err[8];
    for (;;) {
        ssize_t n = pt_sock_read(&w->sock, buf, sizeof(buf), err, sizeof(err));
        if (n > 0 && redisReaderFeed(w->ctx->reader, buf, (size_t)n) == REDIS_OK)
            continue;
        return n == PT_SOCK_WANT_READ || n == PT_SOCK_WANT_WRITE;
    }
}

bool pt_sentinel_switch_parse(const char *msg, size_t len, const char *master, char *host,
                              size_t hostlen, int *port) {
    /* "<name> <old-ip> <old-port> <new-ip> <new-port>" */
    const char *word[5];
    size_t wlen[5], n = 0;
    for (size_t i = 0; i < len && n < 5;) {
        while (i < len && msg[i] == ' ')
            i++;
        if (i == len)
            break;
        word[n] = msg + i;
        while (i < len && msg[i] != ' ')
            i++;
        wlen[n] = (size_t)(msg + i - word[n]);
        n++;
    }
    if (n != 5 || wlen[0] != strlen(master) || memcmp(word[0], master, wlen[0]) != 0 ||
        wlen[3] >= hostlen || wlen[4] > 5)
        return false;
    char digits[6];
    memcpy(digits, word[4], wlen[4]);
    digits[wlen[4]] = '\0';
    char *end = NULL;
    long p = strtol(digits, &end, 10);
    if (end == digits || *end != '\0' || p <= 0 || p > 65535)
        return false;
    memcpy(host, word[3], wlen[3]);
    host[wlen[3]] = '\0';
    *port = (int)p;
    return true;
}

bool pt_sentinel_watch_poll(pt_sentinel_watch *w, const pt_redis_url *url, char *host,
                            size_t hostlen, int *port) {
    int64_t now = mono_us();
    if (now - w->polled_us < PT_SENTINEL_WATCH_EVERY_US)
        return false;
    w->polled_us = now;
    if (w->ctx == NULL)
        subscribe(w, url, now);
    if (w->ctx == NULL)
        return false;
    struct pollfd p = {.fd = w->ctx->fd, .events = POLLIN | (w->sent ? 0 : POLLOUT)};
    if (!pt_sock_pending(&w->sock) && poll(&p, 1, 0) <= 0)
        return false;
    /* A TLS handshake under way reads as well as writes. */
    if ((p.revents & (POLLOUT | POLLIN)) && !w->sent && !send_queued(w)) {
        unsubscribe(w);
        return false;
    }
    if (!w->sent || (!(p.revents & POLLIN) && !pt_sock_pending(&w->sock))) {
        if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
            unsubscribe(w);
        return false;
    }
    if (!read_available(w)) { /* closed, or an error */
        unsubscribe(w);
        return false;
    }
    bool moved = false;
    void *r = NULL;
    while (redisGetReplyFromReader(w->ctx, &r) == REDIS_OK && r != NULL) {
        redisReply *m = r;
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
            m->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(m->element[0]->str, "message") == 0 && m->element[2]->type == REDIS_REPLY_STRING)
            moved = pt_sentinel_switch_parse(m->element[2]->str, m->element[2]->len, url->master,
                                             host, hostlen, port) ||
                    moved;
        bool refused = m->type == REDIS_REPLY_ERROR; /* AUTH or SUBSCRIBE refused */
        freeReplyObject(r);
        r = NULL;
        if (refused) {
            unsubscribe(w);
            return moved;
        }
    }
    if (w->ctx->err)
        unsubscribe(w);
    return moved;
}
