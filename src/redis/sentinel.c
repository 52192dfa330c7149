/* sentinel.c — master discovery through Redis Sentinel (sentinel.h). */
#include "redis/sentinel.h"
#include "redis/command.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Outcome of asking one sentinel. */
typedef enum { ASK_OK, ASK_UNKNOWN_NAME, ASK_FAILED } ask_result;

static ask_result ask_one(const pt_redis_url *url, const pt_url_node *s, int64_t deadline,
                          char *host, size_t hostlen, int *port, char *why, size_t whylen) {
    int64_t left = deadline - mono_us();
    if (left <= 0) {
        snprintf(why, whylen, "no time left");
        return ASK_FAILED;
    }
    struct timeval tv = {(time_t)(left / 1000000), (suseconds_t)(left % 1000000)};
    /* Sentinels are listed as addresses in practice; a name is resolved by
     * hiredis here (within the connect timeout, not the deadline). */
    redisContext *ctx = redisConnectWithTimeout(s->host, s->port, tv);
    if (ctx != NULL)
        pt_reader_bound(ctx->reader);
    if (ctx == NULL || ctx->err) {
        snprintf(why, whylen, "%s", ctx != NULL ? ctx->errstr : "out of memory");
        redisFree(ctx);
        return ASK_FAILED;
    }
    redisSetTimeout(ctx, tv);
    ask_result res = ASK_FAILED;
    redisReply *reply = NULL;
    if (url->sentinel_password[0] != '\0') {
        reply = redisCommand(ctx, "AUTH %s", url->sentinel_password);
        if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
            snprintf(why, whylen, "AUTH: %s", reply != NULL ? reply->str : ctx->errstr);
            goto out;
        }
        freeReplyObject(reply);
    }
    reply = redisCommand(ctx, "SENTINEL get-master-addr-by-name %s", url->master);
    if (reply == NULL) {
        snprintf(why, whylen, "%s", ctx->errstr);
    } else if (reply->type == REDIS_REPLY_NIL) {
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
        snprintf(why, whylen, "%s", reply->type == REDIS_REPLY_ERROR ? reply->str
                                                                      : "unexpected answer");
    }
out:
    if (reply != NULL)
        freeReplyObject(reply);
    redisFree(ctx);
    return res;
}

/* Moves sentinel i to the back of the list. */
static void to_back(pt_redis_url *url, size_t i) {
    pt_url_node failed = url->nodes[i];
    memmove(&url->nodes[i], &url->nodes[i + 1], (url->nnodes - i - 1) * sizeof(failed));
    url->nodes[url->nnodes - 1] = failed;
}

porteiro_status pt_sentinel_master(pt_redis_url *url, int64_t deadline, char *host,
                                   size_t hostlen, int *port, char *errbuf, size_t errlen) {
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
