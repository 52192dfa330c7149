/* slots.c — the slot map of a Redis Cluster (slots.h). */
#include "topology/slots.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool is_int(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_INTEGER;
}
static bool is_str(const redisReply *r) {
    return r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}
static bool is_arr(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_ARRAY; /* RESP2: maps are flat arrays */
}

static bool name_is(const redisReply *r, const char *s) {
    return is_str(r) && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* The value of field `name` in a RESP2 flat [k, v, k, v...] array. */
static const redisReply *field(const redisReply *map, const char *name) {
    for (size_t i = 0; is_arr(map) && i + 1 < map->elements; i += 2)
        if (name_is(map->element[i], name))
            return map->element[i + 1];
    return NULL;
}

/* A port as a node announces it: an integer from 1 to 65535. */
static bool is_port(const redisReply *r) {
    return is_int(r) && r->integer >= 1 && r->integer <= 65535;
}

static void assign(int16_t *owner, long long lo, long long hi, int idx) {
    for (long long s = lo; s <= hi && s < PT_SLOTS; s++)
        if (s >= 0)
            owner[s] = (int16_t)idx;
}

/* The master of one shard that is online; its index or -1. */
static int shard_master(const redisReply *nodes, bool tls, pt_slots_add_fn add, void *ctx) {
    for (size_t j = 0; is_arr(nodes) && j < nodes->elements; j++) {
        const redisReply *n = nodes->element[j];
        const redisReply *ip = field(n, "ip"), *port = field(n, "port");
        if (tls && field(n, "tls-port") != NULL)
            port = field(n, "tls-port");
        const redisReply *health = field(n, "health");
        if (!name_is(field(n, "role"), "master") || !is_str(ip) || !is_port(port) ||
            (health != NULL && !name_is(health, "online")))
            continue;
        return add(ctx, ip->str, ip->len, (int)port->integer);
    }
    return -1;
}

static int from_shards(const redisReply *reply, int16_t *owner, bool tls, pt_slots_add_fn add,
                       void *ctx);

int pt_slots_from_shards(const redisReply *reply, int16_t *owner, pt_slots_add_fn add, void *ctx) {
    return from_shards(reply, owner, false, add, ctx);
}

int pt_slots_from_shards_tls(const redisReply *reply, int16_t *owner, pt_slots_add_fn add,
                             void *ctx) {
    return from_shards(reply, owner, true, add, ctx);
}

static int from_shards(const redisReply *reply, int16_t *owner, bool tls, pt_slots_add_fn add,
                       void *ctx) {
    if (!is_arr(reply))
        return -1;
    for (size_t s = 0; s < PT_SLOTS; s++)
        owner[s] = -1;
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *shard = reply->element[i];
        const redisReply *slots = field(shard, "slots");
        if (!is_arr(slots))
            return -1;
        int idx = shard_master(field(shard, "nodes"), tls, add, ctx);
        for (size_t k = 0; idx >= 0 && k + 1 < slots->elements; k += 2)
            if (is_int(slots->element[k]) && is_int(slots->element[k + 1]))
                assign(owner, slots->element[k]->integer, slots->element[k + 1]->integer, idx);
    }
    return 0;
}

int pt_slots_from_slots(const redisReply *reply, int16_t *owner, pt_slots_add_fn add, void *ctx) {
    if (!is_arr(reply))
        return -1;
    for (size_t s = 0; s < PT_SLOTS; s++)
        owner[s] = -1;
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *range = reply->element[i];
        if (!is_arr(range) || range->elements < 3 || !is_int(range->element[0]) ||
            !is_int(range->element[1]))
            return -1;
        const redisReply *m = range->element[2];
        if (!is_arr(m) || m->elements < 2 || !is_str(m->element[0]) || !is_port(m->element[1]))
            return -1;
        int idx = add(ctx, m->element[0]->str, m->element[0]->len, (int)m->element[1]->integer);
        if (idx >= 0)
            assign(owner, range->element[0]->integer, range->element[1]->integer, idx);
    }
    return 0;
}
