/* slots.h — the Redis Cluster slot map read from CLUSTER SHARDS
 * (Redis >= 7) or CLUSTER SLOTS. No I/O. A key's slot is redis/keyslot.h. */
#ifndef PT_TOPOLOGY_SLOTS_H
#define PT_TOPOLOGY_SLOTS_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "redis/keyslot.h"

/* Called once per master found in a reply with its address; returns the
 * master's index (>= 0) or -1 when it cannot be added. */
typedef int (*pt_slots_add_fn)(void *ctx, const char *host, size_t hostlen, int port);

/* Fills owner[PT_SLOTS] (master index, -1 for a slot nobody serves) from a
 * CLUSTER SHARDS reply; -1 if the reply is not one (an older Redis: try
 * CLUSTER SLOTS). */
int pt_slots_from_shards(const redisReply *reply, int16_t *owner, pt_slots_add_fn add, void *ctx);
/* The same for a client over TLS: a node's "tls-port" (tls-cluster yes
 * lists it beside the plain "port"), else its "port". */
int pt_slots_from_shards_tls(const redisReply *reply, int16_t *owner, pt_slots_add_fn add,
                             void *ctx);
/* The same from a CLUSTER SLOTS reply. */
int pt_slots_from_slots(const redisReply *reply, int16_t *owner, pt_slots_add_fn add, void *ctx);

#endif
