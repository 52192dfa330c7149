/* sentinel.c — master discovery through Redis Sentinel (sentinel.h). */
#include "topology/sentinel.h"
#include "redis/command.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "redis/tls.h"

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Outcome of asking one sentinel. */
typedef enum { ASK_OK, ASK_UNKNOWN_NAME, ASK_FAILED } ask_result;

/* Waits for what the stream wants (PT_SOCK_WANT_*) until the deadline. */
static bool wait_for(int fd, ssize_t want, int64_t deadline, char *why, size_t whylen) {
    for (;;) {
        int64_t left = deadline - mono_us();
        if (left <= 0) {
            snprintf(why, whylen, "no answer within the time budget");
            return false;
        }
        struct pollfd p = {.fd = fd, .events = want == PT_SOCK_WANT_WRITE ? POLLOUT : POLLIN};
        int n = poll(&p, 1, (int)((left + 999) / 1000));
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR) {
            snprintf(why, whylen, "poll: %s", strerror(errno));
            return false;
        }
    }
}

/* Sends what ctx holds through the stream and reads one reply: the
 * handshake of a TLS stream first. NULL on failure (the cause in why). */
static redisReply *exchange(redisContext *ctx, pt_sock *sock, int64_t deadline, char *why,
                            size_t whylen) {
    char buf[4096];
    ssize_t n;
    while ((n = pt_sock_handshake(sock, why, whylen)) != PT_SOCK_DONE)
        if (n == PT_SOCK_ERROR || !wait_for(sock->fd, n, deadline, why, whylen))
            return NULL;
    while (sdslen(ctx->obuf) > 0) {
        n = pt_sock_write(sock, ctx->obuf, sdslen(ctx->obuf), why, whylen);
        if (n > 0)
            sdsrange(ctx->obuf, (int)n, -1);
        else if (n == PT_SOCK_ERROR || !wait_for(sock->fd, n, deadline, why, whylen))
            return NULL;
    }
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
            snprintf(why, whylen, "%s", ctx->errstr);
            return NULL;
        }
        if (reply != NULL)
            return reply;
        n = pt_sock_read(sock, buf, sizeof(buf), why, whylen);
        if (n > 0)
            redisReaderFeed(ctx->reader, buf, (size_t)n);
        else if (n == PT_SOCK_ERROR || !wait_for(sock->fd, n, deadline, why, whylen))
            return NULL;
    }
}

/* AUTH (if the sentinels want it), then where the master is. */
static ask_result ask(redisContext *ctx, pt_sock *sock, const pt_redis_url *url, int64_t deadline,
                      char *host, size_t hostlen, int *port, char *why, size_t whylen) {
    redisReply *reply = NULL;
    if (url->sentinel_password[0] != '\0') {
        redisAppendCommand(ctx, "AUTH %s", url->sentinel_password);
        reply = exchange(ctx, sock, deadline, why, whylen);
        if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
            if (reply != NULL)
                snprintf(why, whylen, "AUTH: %s", reply->str);
            freeReplyObject(reply);
            return ASK_FAILED;
        }
        freeReplyObject(reply);
    }
    redisAppendCommand(ctx, "SENTINEL get-master-addr-by-name %s", url->master);
    if ((reply = exchange(ctx, sock, deadline, why, whylen)) == NULL)
        return ASK_FAILED;
    ask_result res = ASK_FAILED;
    if (reply->type == REDIS_REPLY_NIL) {
        res = ASK_UNKNOWN_NAME;
    } else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
               reply->element[0]->type == REDIS_REPLY_STRING &&
               reply->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(host, hostlen, "%s", reply->element[0]->str);
        *port = atoi(reply->element[1]->str);
        res = *port > 0 && *port < 65536 ? ASK_OK : ASK_FAILED;
        if (res != ASK_OK)
            snprintf(why, whylen, "bad port in the answer");
    } else {
        snprintf(why, whylen, "%s",
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected answer");
    }
    freeReplyObject(reply);
    return res;
}

static ask_result ask_one(const pt_redis_url *url, const pt_url_node *s, int64_t deadline,
                          char *host, size_t hostlen, int *port, char *why, size_t whylen) {
    int64_t left = deadline - mono_us();
    if (left <= 0) {
        snprintf(why, whylen, "no time left");
        return ASK_FAILED;
    }
    struct timeval tv = {(time_t)(left / 1000000), (suseconds_t)(left % 1000000)};
    /* Sentinels are listed as addresses in practice; a name is resolved by
     * hiredis here (within the connect timeout, not the deadline). The
     * exchange itself goes through the stream: plain, or TLS (url's). */
    redisContext *ctx = redisConnectWithTimeout(s->host, s->port, tv);
    if (ctx != NULL)
        pt_reader_bound(ctx->reader);
    if (ctx == NULL || ctx->err) {
        snprintf(why, whylen, "%s", ctx != NULL ? ctx->errstr : "out of memory");
        redisFree(ctx);
        return ASK_FAILED;
    }
    pt_sock sock;
    ask_result res = ASK_FAILED;
    if (redisSetTimeout(ctx, (struct timeval){0, 0}) == REDIS_OK &&
        fcntl(ctx->fd, F_SETFL, fcntl(ctx->fd, F_GETFL) | O_NONBLOCK) == 0 &&
        pt_sock_init(&sock, ctx->fd, url->tls_conf, s->host, why, whylen) == PT_SOCK_DONE) {
        res = ask(ctx, &sock, url, deadline, host, hostlen, port, why, whylen);
        pt_sock_close(&sock);
    } else if (why[0] == '\0') {
        snprintf(why, whylen, "cannot set the socket up");
    }
    redisFree(ctx);
    return res;
}

/* Moves sentinel i to the back of the list. */
static void to_back(pt_redis_url *url, size_t i) {
    pt_url_node failed = url->nodes[i];
    memmove(&url->nodes[i], &url->nodes[i + 1], (url->nnodes - i - 1) * sizeof(failed));
    url->nodes[url->nnodes - 1] = failed;
}

porteiro_status pt_sentinel_master(pt_redis_url *url, int64_t deadline, char *host, size_t hostlen,
                                   int *port, char *errbuf, size_t errlen) {
    char why[256] = "";
    size_t unknown = 0, n = url->nnodes;
    for (size_t tried = 0, i = 0; tried < n; tried++) {
        pt_url_node s = url->nodes[i];
        ask_result res = ask_one(url, &s, deadline, host, hostlen, port, why, sizeof(why));
        if (res == ASK_OK)
            return PORTEIRO_OK;
        if (res == ASK_UNKNOWN_NAME) {
            unknown++;
            i++; /* it answered: it keeps its place */
            continue;
        }
        to_back(url, i);
        snprintf(errbuf, errlen, "sentinel %s:%d: %s", s.host, s.port, why);
    }
    if (unknown > 0)
        snprintf(errbuf, errlen, "sentinel: no master named '%s' (%zu of %zu sentinels answered)",
                 url->master, unknown, n);
    else
        snprintf(errbuf, errlen, "sentinel: no sentinel answered (%zu tried; last: %s)", n, why);
    return PORTEIRO_ERR_CONNECT;
}
