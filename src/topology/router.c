/* router.c — one node or a cluster behind one interface (router.h). */
#include "topology/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/command.h"
#include "topology/sentinel.h"

struct pt_router {
    pt_redis_url url;
    pt_redis *one;       /* one node (or a sentinel's master) */
    pt_cluster *cluster; /* or a cluster */
};

pt_router *pt_router_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms) {
    pt_router *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->url = *url;
    if (url->kind == PT_URL_SENTINEL) /* the connection asks the sentinels */
        r->url.locate = &pt_sentinel_locator;
    if (url->kind == PT_URL_CLUSTER)
        r->cluster = pt_cluster_new(url, connect_timeout_ms, command_timeout_ms);
    else
        r->one = pt_redis_new(&r->url, connect_timeout_ms, command_timeout_ms);
    if (r->cluster == NULL && r->one == NULL) {
        free(r);
        return NULL;
    }
    return r;
}

void pt_router_free(pt_router *r) {
    if (r == NULL)
        return;
    pt_redis_free(r->one);
    pt_cluster_free(r->cluster);
    free(r);
}

bool pt_router_is_cluster(const pt_router *r) {
    return r->cluster != NULL;
}
pt_cluster *pt_router_cluster(pt_router *r) {
    return r->cluster;
}

void pt_router_set_batch_max(pt_router *r, size_t batch_max) {
    if (r->cluster != NULL)
        pt_cluster_set_batch_max(r->cluster, batch_max);
    else
        pt_redis_set_batch_max(r->one, batch_max);
}

void pt_router_set_module(pt_router *r, bool allowed) {
    if (r->cluster != NULL)
        pt_cluster_set_module(r->cluster, allowed);
    else
        pt_redis_set_module(r->one, allowed);
}

bool pt_router_node_module(const pt_router *r, size_t i) {
    return r->cluster != NULL ? pt_cluster_node_module(r->cluster, i)
                              : pt_redis_uses_module(r->one);
}

porteiro_status pt_router_connect(pt_router *r, char *errbuf, size_t errlen) {
    return r->cluster != NULL ? pt_cluster_connect(r->cluster, errbuf, errlen)
                              : pt_redis_connect(r->one, errbuf, errlen);
}

porteiro_status pt_router_check_many_until(pt_router *r, int64_t deadline_us, const pt_call *calls,
                                           size_t n, porteiro_decision *decisions,
                                           porteiro_status *statuses, int *nodes, bool *node_failed,
                                           char *errbuf, size_t errlen) {
    if (r->cluster != NULL)
        return pt_cluster_check_many_until(r->cluster, deadline_us, calls, n, decisions, statuses,
                                           nodes, node_failed, errbuf, errlen);
    porteiro_status st = pt_redis_check_many_until(r->one, deadline_us, calls, n, decisions,
                                                   statuses, errbuf, errlen);
    for (size_t i = 0; i < n; i++) {
        nodes[i] = 0;
        node_failed[i] = st != PORTEIRO_OK;
    }
    return st;
}

int pt_router_node_of(const pt_router *r, const pt_call *call) {
    if (r->cluster == NULL)
        return 0;
    return pt_cluster_node_of_key(r->cluster, call->keys[0], call->key_lens[0]);
}

size_t pt_router_node_count(const pt_router *r) {
    return r->cluster != NULL ? pt_cluster_node_count(r->cluster) : 1;
}

const char *pt_router_node_name(const pt_router *r, size_t i, char *buf, size_t buflen) {
    if (r->cluster != NULL) {
        snprintf(buf, buflen, "%s", pt_cluster_node_name(r->cluster, i));
    } else {
        const pt_redis_url *u = pt_redis_target(r->one);
        if (u->is_unix)
            snprintf(buf, buflen, "%s", u->host);
        else
            snprintf(buf, buflen, strchr(u->host, ':') ? "[%s]:%d" : "%s:%d", u->host, u->port);
    }
    return buf;
}

bool pt_router_node_serves(const pt_router *r, size_t i) {
    return r->cluster == NULL || pt_cluster_node_serves(r->cluster, i);
}

porteiro_status pt_router_command_key(pt_router *r, const char *key, size_t keylen, int argc,
                                      const char **argv, const size_t *argvlen, redisReply **reply,
                                      char *errbuf, size_t errlen) {
    if (r->cluster != NULL)
        return pt_cluster_command_key(r->cluster, key, keylen, argc, argv, argvlen, reply, errbuf,
                                      errlen);
    return pt_redis_command(r->one, argc, argv, argvlen, reply, errbuf, errlen);
}

porteiro_status pt_router_command_node(pt_router *r, size_t i, int argc, const char **argv,
                                       const size_t *argvlen, redisReply **reply, char *errbuf,
                                       size_t errlen) {
    if (r->cluster != NULL)
        return pt_cluster_command_node(r->cluster, i, argc, argv, argvlen, reply, errbuf, errlen);
    return pt_redis_command(r->one, argc, argv, argvlen, reply, errbuf, errlen);
}

void pt_router_maintain(pt_router *r, int64_t deadline_us, bool suspect) {
    if (r->cluster != NULL)
        pt_cluster_maintain(r->cluster, deadline_us, suspect);
}

porteiro_status pt_router_reset(pt_router *r, const pt_call *call, char *errbuf, size_t errlen) {
    if (r->cluster == NULL)
        return pt_redis_reset(r->one, call, errbuf, errlen);
    pt_command cmd;
    redisReply *reply = NULL;
    pt_command_reset(&cmd, call);
    porteiro_status st =
        pt_cluster_command_key(r->cluster, call->keys[0], call->key_lens[0], cmd.argc, cmd.argv,
                               cmd.argvlen, &reply, errbuf, errlen);
    return pt_reply_done(st, reply, errbuf, errlen);
}

const pt_redis_url *pt_router_target(const pt_router *r) {
    return r->one != NULL ? pt_redis_target(r->one) : &r->url;
}

int pt_router_eviction_risk(const pt_router *r) {
    return r->one != NULL ? pt_redis_eviction_risk(r->one) : -1;
}

uint64_t pt_router_connects(const pt_router *r) {
    return r->one != NULL ? pt_redis_connects(r->one) : pt_cluster_connects(r->cluster);
}
