/* router.h — where the limiter sends its Redis traffic: one node (conn.h,
 * which also follows a Sentinel-watched master through the locator the
 * router hangs on its URL: redis/locate.h, sentinel_locate.c), or a Redis
 * Cluster (cluster.h). The limiter sees nodes by index: one node is node 0; a
 * cluster's masters keep their index for the handle's life, so a breaker
 * and health per node can be kept beside them. */
#ifndef PT_TOPOLOGY_ROUTER_H
#define PT_TOPOLOGY_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "redis/conn.h"
#include "topology/cluster.h"

typedef struct pt_router pt_router;

pt_router *pt_router_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms);
void pt_router_free(pt_router *r);
void pt_router_set_batch_max(pt_router *r, size_t batch_max);
bool pt_router_is_cluster(const pt_router *r);
/* The cluster behind r (NULL on one node), for the event-loop router. */
pt_cluster *pt_router_cluster(pt_router *r);
/* The first connection (a cluster: its slot map), within the connect timeout. */
/* May checks run as the Redis module's commands where a node has it
 * (conn.h, pt_redis_set_module)? */
void pt_router_set_module(pt_router *r, bool allowed);
/* Node i's checks run as the module's commands now. */
bool pt_router_node_module(const pt_router *r, size_t i);
porteiro_status pt_router_connect(pt_router *r, char *errbuf, size_t errlen);

/* As pt_cluster_check_many_until; on one node nodes[i] is 0 and
 * node_failed[i] is the round trip's failure. */
porteiro_status pt_router_check_many_until(pt_router *r, int64_t deadline_us, const pt_call *calls,
                                           size_t n, porteiro_decision *decisions,
                                           porteiro_status *statuses, int *nodes, bool *node_failed,
                                           char *errbuf, size_t errlen);
/* The node a call goes to now (no I/O): 0 on one node; -1 when a cluster's
 * map does not know yet. */
int pt_router_node_of(const pt_router *r, const pt_call *call);
size_t pt_router_node_count(const pt_router *r);
/* "host:port" (or the socket path) of node i. */
const char *pt_router_node_name(const pt_router *r, size_t i, char *buf, size_t buflen);
/* Node i holds slots (always on one node). */
bool pt_router_node_serves(const pt_router *r, size_t i);

/* A command about key (routed by its slot on a cluster). */
porteiro_status pt_router_command_key(pt_router *r, const char *key, size_t keylen, int argc,
                                      const char **argv, const size_t *argvlen, redisReply **reply,
                                      char *errbuf, size_t errlen);
/* A command on node i (SCAN, INFO: the caller goes over every node). */
porteiro_status pt_router_command_node(pt_router *r, size_t i, int argc, const char **argv,
                                       const size_t *argvlen, redisReply **reply, char *errbuf,
                                       size_t errlen);
/* A cluster: see pt_cluster_maintain; nothing on one node. */
void pt_router_maintain(pt_router *r, int64_t deadline_us, bool suspect);
porteiro_status pt_router_reset(pt_router *r, const pt_call *call, char *errbuf, size_t errlen);

const pt_redis_url *pt_router_target(const pt_router *r);
int pt_router_eviction_risk(const pt_router *r);
uint64_t pt_router_connects(const pt_router *r);

#endif
