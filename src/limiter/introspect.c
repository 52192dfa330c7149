/* introspect.c — what tools ask of a limiter: the script it runs, and the
 * Redis memory its keys use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/handle.h"
#include "redis/async_conn.h"
#include "redis/command.h"
#include "topology/acluster.h"

/* Keys asked for per SCAN step (a hint to Redis, not a bound). */
#define SCAN_COUNT "1000"

/* Sums MEMORY USAGE over KEYS in one round trip; a key that expired between
 * the SCAN and this call counts nothing. */
static const char usage_script[] =
    "local n = 0\n"
    "for i = 1, #KEYS do\n"
    "  local b = redis.call('MEMORY', 'USAGE', KEYS[i])\n"
    "  if b then n = n + b end\n"
    "end\n"
    "return n\n";


const char *porteiro_script_for(porteiro_algorithm a, size_t *len) {
    if ((unsigned)a > PORTEIRO_CONCURRENCY)
        return NULL;
    /* What a check of one limit of a runs: its flat script where it has one. */
    const pt_script *s = a > 0 && a < PT_SCRIPT_CHECKED ? &pt_scripts[PT_SCRIPT_CHECK(a)] : &pt_scripts[a];
    if (len != NULL)
        *len = s->len;
    return s->text;
}

const char *porteiro_script(size_t *len) { return porteiro_script_for(PT_SCRIPT_ALL, len); }

const char *porteiro_script_for_limits(const porteiro_limit *limits, size_t n, size_t *len) {
    pt_call call; /* only what chooses the script: the algorithms, their count */
    if (limits == NULL || n == 0 || n > PORTEIRO_MAX_LIMITS)
        return NULL;
    call.nlimits = n;
    call.refund = false;
    for (size_t i = 0; i < n; i++) {
        if (porteiro_algorithm_name(limits[i].algorithm) == NULL)
            return NULL;
        call.limits[i] = limits[i];
    }
    const pt_script *s = pt_script_for(&call);
    if (len != NULL)
        *len = s->len;
    return s->text;
}

/* "prefix:*" with the glob characters of the prefix escaped, so that a
 * prefix such as "a*" matches only itself. out holds 2 * n + 3 bytes. */
static size_t match_pattern(const char *prefix, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strchr("*?[]\\", prefix[i]) != NULL)
            out[k++] = '\\';
        out[k++] = prefix[i];
    }
    memcpy(out + k, ":*", 3);
    return k + 2;
}

static porteiro_status bad_reply(porteiro_t *p, redisReply *reply, const char *what) {
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: %.*s", (int)reply->len, reply->str);
        return pt_reply_error_status(reply);
    }
    snprintf(p->errmsg, sizeof(p->errmsg), "redis: unexpected reply to %s", what);
    return PORTEIRO_ERR_PROTOCOL;
}

/* MEMORY USAGE of the n keys of a SCAN step, summed by one EVAL. */
static porteiro_status sum_bytes(porteiro_t *p, size_t node, redisReply *const *keys, size_t n,
                                 uint64_t *bytes) {
    const char **argv = malloc((n + 3) * sizeof(*argv));
    size_t *lens = malloc((n + 3) * sizeof(*lens));
    char count[24];
    redisReply *reply = NULL;
    porteiro_status st = PORTEIRO_ERR_NOMEM;

    if (argv != NULL && lens != NULL) {
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = usage_script, lens[1] = sizeof(usage_script) - 1;
        lens[2] = (size_t)snprintf(count, sizeof(count), "%zu", n), argv[2] = count;
        for (size_t i = 0; i < n; i++)
            argv[i + 3] = keys[i]->str, lens[i + 3] = keys[i]->len;
        st = pt_router_command_node(p->redis, node, (int)(n + 3), argv, lens, &reply, p->errmsg,
                                    sizeof(p->errmsg));
    }
    if (st == PORTEIRO_OK) {
        if (reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0)
            *bytes += (uint64_t)reply->integer;
        else
            st = bad_reply(p, reply, "MEMORY USAGE");
    }
    if (reply != NULL)
        freeReplyObject(reply);
    free(argv);
    free(lens);
    return st;
}

/* One SCAN step from cursor (a decimal string, updated in place). */
static porteiro_status scan_step(porteiro_t *p, size_t node, const char *pattern, size_t pattern_len,
                                 char cursor[32], uint64_t *keys, uint64_t *bytes) {
    const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT};
    size_t lens[] = {4, strlen(cursor), 5, pattern_len, 5, strlen(SCAN_COUNT)};
    redisReply *reply = NULL;
    porteiro_status st =
        pt_router_command_node(p->redis, node, 6, argv, lens, &reply, p->errmsg, sizeof(p->errmsg));
    if (st != PORTEIRO_OK)
        return st;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING || reply->element[0]->len >= 32 ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
        st = bad_reply(p, reply, "SCAN");
    } else {
        redisReply *found = reply->element[1];
        memcpy(cursor, reply->element[0]->str, reply->element[0]->len);
        cursor[reply->element[0]->len] = '\0';
        *keys += found->elements;
        /* On a cluster one SCAN step's keys share a node, not a slot: one
         * EVAL per key (a script's declared keys must share a slot). */
        bool cluster = pt_router_is_cluster(p->redis);
        for (size_t k = 0; st == PORTEIRO_OK && k < found->elements; k += cluster ? 1 : found->elements)
            st = sum_bytes(p, node, found->element + k, cluster ? 1 : found->elements, bytes);
    }
    freeReplyObject(reply);
    return st;
}

porteiro_status porteiro_key_usage(porteiro_t *p, uint64_t *keys, uint64_t *bytes) {
    char pattern[2 * PT_MAX_PREFIX + 3];
    char cursor[32] = "0";
    uint64_t nkeys = 0, nbytes = 0;
    porteiro_status st = PORTEIRO_OK;

    if (p == NULL || keys == NULL || bytes == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    if (p->redis == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg), "key usage needs Redis: the memory backend "
                                               "lives only inside its process");
        st = PORTEIRO_ERR_UNSUPPORTED;
    }
    size_t pattern_len = match_pattern(p->prefix, p->prefix_len, pattern);
    /* SCAN ends when Redis hands back cursor 0 again; on a cluster, once
     * per master (a node without slots holds no live keys). */
    size_t nodes = p->redis != NULL ? pt_router_node_count(p->redis) : 0;
    for (size_t i = 0; st == PORTEIRO_OK && i < nodes; i++) {
        if (!pt_router_node_serves(p->redis, i))
            continue;
        memcpy(cursor, "0", 2);
        while (st == PORTEIRO_OK) {
            st = scan_step(p, i, pattern, pattern_len, cursor, &nkeys, &nbytes);
            if (strcmp(cursor, "0") == 0)
                break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (st == PORTEIRO_OK) {
        *keys = nkeys;
        *bytes = nbytes;
    }
    return st;
}

int porteiro_is_cluster(const porteiro_t *p) {
    return p != NULL && p->redis != NULL && pt_router_is_cluster(p->redis);
}

/* PING on node i: true when it answered PONG. */
static bool ping_node(porteiro_t *p, size_t i) {
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    redisReply *reply = NULL;
    char err[256];
    bool up = pt_router_command_node(p->redis, i, 1, argv, lens, &reply, err, sizeof(err)) ==
                  PORTEIRO_OK &&
              reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;
    if (reply != NULL)
        freeReplyObject(reply);
    return up;
}

size_t porteiro_nodes(porteiro_t *p, bool ping, porteiro_node *out, size_t max) {
    if (p == NULL || p->redis == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    bool cluster = pt_router_is_cluster(p->redis);
    size_t n = 0, total = pt_router_node_count(p->redis);
    for (size_t i = 0; i < total; i++) {
        if (!pt_router_node_serves(p->redis, i))
            continue; /* a master that lost its slots (failed over, resharded away) */
        if (n < max) {
            const pt_breaker *b = cluster && i < PT_CLUSTER_MAX_NODES ? &p->node_breakers[i]
                                                                       : &p->breaker;
            pt_router_node_name(p->redis, i, out[n].name, sizeof(out[n].name));
            out[n].breaker_state = (int)b->state;
            out[n].up = ping ? ping_node(p, i) : b->state != 1;
            /* Either of its connections: the blocking one, the loop's. */
            out[n].module = pt_router_node_module(p->redis, i) ||
                            (p->aconn != NULL && pt_aconn_uses_module(p->aconn)) ||
                            (p->acluster != NULL && pt_acluster_node_module(p->acluster, i));
        }
        n++;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}
