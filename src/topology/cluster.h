/* cluster.h — Redis Cluster routing over blocking connections (conn.h).
 *
 * The slot map comes from CLUSTER SHARDS (CLUSTER SLOTS on Redis < 7),
 * asked of a known master or else a seed. One pt_redis per master, made on
 * first use. A check goes to the master of its keys' slot (all keys of one
 * check share a hash tag, core/call.c); checks for one master travel
 * together (pipelined and batched as on one node); every master's checks
 * are written before any answer is read, so the masters work in parallel,
 * all within the caller's deadline.
 *
 * MOVED: the slot's owner is updated from the reply, the whole map is read
 * again (at most PT_CLUSTER_REFRESH_PER_S times a second, whatever the
 * storm), and the check is sent again at the new owner. ASK: ASKING and
 * the check, at the target, without touching the map. TRYAGAIN: sent again
 * a few ms later, while the deadline allows. CLUSTERDOWN, a slot without an
 * owner or a node that fails: that check fails (node_failed tells which). */
#ifndef PT_TOPOLOGY_CLUSTER_H
#define PT_TOPOLOGY_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "redis/conn.h"
#include "redis/url.h"

#define PT_CLUSTER_MAX_NODES 64
#define PT_CLUSTER_REFRESH_PER_S 5

typedef struct pt_cluster pt_cluster;

pt_cluster *pt_cluster_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms);
void pt_cluster_free(pt_cluster *c);
void pt_cluster_set_batch_max(pt_cluster *c, size_t batch_max);

/* Reads the slot map from a seed (the connect timeout). */
porteiro_status pt_cluster_connect(pt_cluster *c, char *errbuf, size_t errlen);

/* Nodes ever seen as masters, in a stable order (indexes never change;
 * a node that lost its slots keeps its index). */
size_t pt_cluster_node_count(const pt_cluster *c);
/* As pt_redis_set_module, for every node's connection; and whether node
 * i's connection uses the module now. */
void pt_cluster_set_module(pt_cluster *c, bool allowed);
bool pt_cluster_node_module(const pt_cluster *c, size_t i);
const char *pt_cluster_node_name(const pt_cluster *c, size_t i); /* "host:port" */
/* True when node i serves at least one slot in the current map. */
bool pt_cluster_node_serves(const pt_cluster *c, size_t i);
/* The master of a key's slot in the current map, or -1. No I/O. */
int pt_cluster_node_of_key(const pt_cluster *c, const char *key, size_t len);

/* Checks routed by slot; statuses[i] and decisions[i] as in
 * pt_redis_check_many_until. nodes[i]: the master that last had check i
 * (-1: none); node_failed[i]: check i failed because that node did
 * (connection, time, a node error), not on its own. Returns PORTEIRO_OK
 * when every node that was asked answered. */
porteiro_status pt_cluster_check_many_until(pt_cluster *c, int64_t deadline_us,
                                            const pt_call *calls, size_t n,
                                            porteiro_decision *decisions, porteiro_status *statuses,
                                            int *nodes, bool *node_failed, char *errbuf,
                                            size_t errlen);

/* One command for the master of key's slot (MOVED followed once). */
porteiro_status pt_cluster_command_key(pt_cluster *c, const char *key, size_t keylen, int argc,
                                       const char **argv, const size_t *argvlen, redisReply **reply,
                                       char *errbuf, size_t errlen);
/* One command on master i (INFO, SCAN: the caller goes over every node). */
porteiro_status pt_cluster_command_node(pt_cluster *c, size_t i, int argc, const char **argv,
                                        const size_t *argvlen, redisReply **reply, char *errbuf,
                                        size_t errlen);
uint64_t pt_cluster_connects(const pt_cluster *c);
/* Reads the slot map again (rate-limited as above) when a node failed
 * since the last read, or when the caller suspects the map (suspect: it
 * holds back checks for a master whose breaker is open): a dead master's slots move to its promoted
 * replica, and no MOVED will tell (the dead node answers nothing). */
void pt_cluster_maintain(pt_cluster *c, int64_t deadline_us, bool suspect);

/* For the event-loop router (acluster.h), which shares this table's node
 * indexes (the limiter keeps a breaker per index). The caller serialises
 * these with every other use of c. */
/* The index of host:port, added if new; -1 when the table is full. */
int pt_cluster_node_add(pt_cluster *c, const char *host, size_t hostlen, int port);
/* Node i's address with the cluster's credentials. */
const pt_redis_url *pt_cluster_node_url(const pt_cluster *c, size_t i);
/* Copies the slot map (owner[PT_SLOTS], -1: none); false when no map has
 * been read yet (all -1 then). */
bool pt_cluster_copy_owners(const pt_cluster *c, int16_t *owner);

#endif
