/* backend_redis.c — blocking Redis access with a total deadline per call. */
#include "backend_redis.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "redis_command.h"

struct pt_redis {
    pt_redis_url url;
    int connect_timeout_ms;
    int command_timeout_ms;
    redisContext *ctx; /* NULL when disconnected */
    char sha[41];
};

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static porteiro_status fail(char *errbuf, size_t errlen, porteiro_status st, const char *fmt,
                            const char *detail) {
    snprintf(errbuf, errlen, fmt, detail);
    return st;
}

pt_redis *pt_redis_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms) {
    pt_redis *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->url = *url;
    r->connect_timeout_ms = connect_timeout_ms;
    r->command_timeout_ms = command_timeout_ms;
    return r;
}

static void drop(pt_redis *r) {
    if (r->ctx != NULL)
        redisFree(r->ctx);
    r->ctx = NULL;
}

void pt_redis_free(pt_redis *r) {
    if (r == NULL)
        return;
    drop(r);
    free(r);
}

const char *pt_redis_sha(const pt_redis *r) { return r->sha; }
const pt_redis_url *pt_redis_target(const pt_redis *r) { return &r->url; }

/* Waits until fd is ready for events or the deadline passes. */
static porteiro_status wait_fd(pt_redis *r, short events, int64_t deadline, char *errbuf,
                               size_t errlen) {
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return fail(errbuf, errlen, PORTEIRO_ERR_TIMEOUT, "redis: no answer within %s",
                        "the time budget");
        struct pollfd p = {.fd = r->ctx->fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return PORTEIRO_OK;
        if (n < 0 && errno != EINTR)
            return fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: poll: %s", strerror(errno));
    }
}

static porteiro_status flush_out(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    int done = 0;
    while (!done) {
        if (redisBufferWrite(r->ctx, &done) != REDIS_OK)
            return fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: %s", r->ctx->errstr);
        if (!done) {
            porteiro_status st = wait_fd(r, POLLOUT, deadline, errbuf, errlen);
            if (st != PORTEIRO_OK)
                return st;
        }
    }
    return PORTEIRO_OK;
}

static porteiro_status read_reply(pt_redis *r, redisReply **out, int64_t deadline, char *errbuf,
                                  size_t errlen) {
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(r->ctx, &reply) != REDIS_OK)
            return fail(errbuf, errlen, PORTEIRO_ERR_PROTOCOL, "redis: %s", r->ctx->errstr);
        if (reply != NULL) {
            *out = reply;
            return PORTEIRO_OK;
        }
        porteiro_status st = wait_fd(r, POLLIN, deadline, errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        if (redisBufferRead(r->ctx) != REDIS_OK)
            return fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: %s", r->ctx->errstr);
    }
}

/* Sends what is buffered and reads n replies into replies[]. On failure the
 * connection is dropped and replies already read are freed. */
static porteiro_status exchange(pt_redis *r, redisReply **replies, size_t n, int64_t deadline,
                                char *errbuf, size_t errlen) {
    porteiro_status st = flush_out(r, deadline, errbuf, errlen);
    size_t got = 0;
    while (st == PORTEIRO_OK && got < n) {
        st = read_reply(r, &replies[got], deadline, errbuf, errlen);
        if (st == PORTEIRO_OK)
            got++;
    }
    if (st != PORTEIRO_OK) {
        while (got > 0)
            freeReplyObject(replies[--got]);
        drop(r);
    }
    return st;
}

static porteiro_status open_socket(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    r->ctx = r->url.is_unix ? redisConnectUnixNonBlock(r->url.host)
                            : redisConnectNonBlock(r->url.host, r->url.port);
    if (r->ctx == NULL)
        return fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "redis: %s", "out of memory");
    if (r->ctx->err) {
        porteiro_status st = fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: connect: %s",
                                  r->ctx->errstr);
        drop(r);
        return st;
    }
    porteiro_status st = wait_fd(r, POLLOUT, deadline, errbuf, errlen);
    if (st == PORTEIRO_OK) {
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (getsockopt(r->ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0)
            st = fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: connect: %s",
                      strerror(soerr ? soerr : errno));
    }
    if (st != PORTEIRO_OK)
        drop(r);
    return st;
}

/* AUTH, SELECT and SCRIPT LOAD, pipelined in one round trip. */
static porteiro_status handshake(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    redisReply *replies[3];
    size_t n = 0;
    char db[16];

    if (r->url.password[0] != '\0') {
        if (r->url.user[0] != '\0')
            redisAppendCommand(r->ctx, "AUTH %s %s", r->url.user, r->url.password);
        else
            redisAppendCommand(r->ctx, "AUTH %s", r->url.password);
        n++;
    }
    if (r->url.db != 0) {
        snprintf(db, sizeof(db), "%d", r->url.db);
        redisAppendCommand(r->ctx, "SELECT %s", db);
        n++;
    }
    redisAppendCommand(r->ctx, "SCRIPT LOAD %b", pt_lua_policy, pt_lua_policy_len);
    n++;
    porteiro_status st = exchange(r, replies, n, deadline, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    for (size_t i = 0; i < n && st == PORTEIRO_OK; i++) {
        if (replies[i]->type == REDIS_REPLY_ERROR) {
            st = pt_reply_error_status(replies[i]);
            snprintf(errbuf, errlen, "redis: %s%.*s", st == PORTEIRO_ERR_AUTH ? "authentication: " : "",
                     (int)replies[i]->len, replies[i]->str);
        }
    }
    redisReply *load = replies[n - 1];
    if (st == PORTEIRO_OK) {
        if (load->type == REDIS_REPLY_STRING && load->len == 40) {
            memcpy(r->sha, load->str, 40);
            r->sha[40] = '\0';
        } else {
            st = fail(errbuf, errlen, PORTEIRO_ERR_PROTOCOL, "redis: %s",
                      "unexpected reply to SCRIPT LOAD");
        }
    }
    for (size_t i = 0; i < n; i++)
        freeReplyObject(replies[i]);
    if (st != PORTEIRO_OK)
        drop(r);
    return st;
}

static porteiro_status ensure_connected(pt_redis *r, int64_t deadline, char *errbuf,
                                        size_t errlen) {
    if (r->ctx != NULL && r->ctx->err == 0)
        return PORTEIRO_OK;
    drop(r);
    porteiro_status st = open_socket(r, deadline, errbuf, errlen);
    return st == PORTEIRO_OK ? handshake(r, deadline, errbuf, errlen) : st;
}

porteiro_status pt_redis_connect(pt_redis *r, char *errbuf, size_t errlen) {
    return ensure_connected(r, mono_ms() + r->connect_timeout_ms, errbuf, errlen);
}

static void append(pt_redis *r, pt_command *cmd) {
    redisAppendCommandArgv(r->ctx, cmd->argc, cmd->argv, cmd->argvlen);
}

/* Internal marks in statuses[] while a pipeline is under way. */
#define UNANSWERED ((porteiro_status)-1)
#define RESEND ((porteiro_status)-2) /* NOSCRIPT: not executed, send as EVAL */

porteiro_status pt_redis_check_many(pt_redis *r, const pt_call *calls, size_t n,
                                    porteiro_decision *decisions, porteiro_status *statuses,
                                    char *errbuf, size_t errlen) {
    int64_t deadline = mono_ms() + r->command_timeout_ms;
    porteiro_status st = ensure_connected(r, deadline, errbuf, errlen);
    redisReply *stack_replies[16];
    redisReply **replies = n <= 16 ? stack_replies : malloc(n * sizeof(*replies));
    pt_command cmd;

    if (replies == NULL)
        st = fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "%s", "out of memory");
    for (size_t i = 0; i < n; i++)
        statuses[i] = UNANSWERED;
    /* Pass 1: EVALSHA for all. Pass 2: EVAL for those the script cache had
     * lost (after a restart, a failover or SCRIPT FLUSH). */
    for (int pass = 0; st == PORTEIRO_OK && pass < 2; pass++) {
        porteiro_status want = pass == 0 ? UNANSWERED : RESEND;
        size_t sent = 0, k = 0;
        for (size_t i = 0; i < n; i++) {
            if (statuses[i] != want)
                continue;
            pt_command_check(&cmd, &calls[i], pass == 0 && r->sha[0] ? r->sha : NULL);
            append(r, &cmd);
            sent++;
        }
        if (sent == 0)
            break;
        st = exchange(r, replies, sent, deadline, errbuf, errlen);
        for (size_t i = 0; st == PORTEIRO_OK && i < n; i++) {
            if (statuses[i] != want)
                continue;
            redisReply *reply = replies[k++];
            if (pass == 0 && pt_reply_is_noscript(reply))
                statuses[i] = RESEND;
            else
                statuses[i] = pt_reply_decision(reply, &calls[i], &decisions[i], errbuf, errlen);
            freeReplyObject(reply);
        }
    }
    porteiro_status first = PORTEIRO_OK;
    for (size_t i = 0; i < n; i++) {
        if (statuses[i] == UNANSWERED || statuses[i] == RESEND)
            statuses[i] = st != PORTEIRO_OK ? st : PORTEIRO_ERR_PROTOCOL;
        if (first == PORTEIRO_OK)
            first = statuses[i];
    }
    if (replies != stack_replies)
        free(replies);
    return first;
}

porteiro_status pt_redis_command(pt_redis *r, int argc, const char **argv, const size_t *argvlen,
                                 redisReply **reply, char *errbuf, size_t errlen) {
    int64_t deadline = mono_ms() + r->command_timeout_ms;
    porteiro_status st = ensure_connected(r, deadline, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    redisAppendCommandArgv(r->ctx, argc, argv, argvlen);
    return exchange(r, reply, 1, deadline, errbuf, errlen);
}

porteiro_status pt_redis_reset(pt_redis *r, const pt_call *call, char *errbuf, size_t errlen) {
    pt_command cmd;
    redisReply *reply = NULL;
    pt_command_reset(&cmd, call);
    porteiro_status st = pt_redis_command(r, cmd.argc, cmd.argv, cmd.argvlen, &reply, errbuf, errlen);
    if (st == PORTEIRO_OK && reply->type == REDIS_REPLY_ERROR) {
        snprintf(errbuf, errlen, "redis: %.*s", (int)reply->len, reply->str);
        st = pt_reply_error_status(reply);
    }
    if (reply != NULL)
        freeReplyObject(reply);
    return st;
}
