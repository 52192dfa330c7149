/* acluster.h — Redis Cluster routing on the event loop: the async twin of
 * cluster.h, over one pt_aconn (async_conn.h) per master.
 *
 * A check goes to the master of its first key's slot (all keys of one check
 * share a hash tag, core/call.c) in this router's own copy of the slot map.
 * Node indexes are the blocking cluster's (cluster.h), reached through
 * pt_acluster_nodes, so the limiter's per-node breakers mean the same node on
 * both paths. The masters of the starting map are connected at once, any
 * other node on first use; each connection batches only checks of one slot
 * and fails only its own checks.
 *
 * MOVED: the slot's owner is set from the reply, the check is sent once more
 * at the new owner, and the whole map is read again (CLUSTER SHARDS, else
 * CLUSTER SLOTS, on a healthy master's connection; at most
 * PT_CLUSTER_REFRESH_PER_S times a second). ASK: ASKING and the check at the
 * target, the map untouched (MOVED and ASK: at most 8 times). TRYAGAIN: sent
 * again 2 ms later, on a timer. All within the check's budget, counted from
 * pt_acluster_check. A node that failed a check,
 * a slot without a master, or pt_acluster_suspect makes the map be read again
 * (rate-limited): a dead master's replica takes over without a MOVED.
 * pt_acluster_command routes a command that is not a check (a quota lease's
 * grant) the same way.
 *
 * Knows nothing of breakers or fallbacks. Loop thread only. */
#ifndef PT_TOPOLOGY_ACLUSTER_H
#define PT_TOPOLOGY_ACLUSTER_H

#include "redis/async_conn.h"
#include "redis/command.h"
#include "topology/cluster.h"

typedef struct pt_acluster pt_acluster;

/* The shared node table, owned by the caller (who locks around it). */
typedef struct pt_acluster_nodes {
    void *ctx;
    /* The index of host:port, added if new; -1 when the table is full. */
    int (*index_of)(void *ctx, const char *host, size_t hostlen, int port);
    /* Node i's address and credentials into *url. */
    void (*url_of)(void *ctx, int i, pt_redis_url *url);
} pt_acluster_nodes;

/* owner[PT_SLOTS]: the map to start from (copied; all -1: read it first).
 * seeds: the cluster URL, asked when no known master answers. */
pt_acluster *pt_acluster_new(const struct pt_loop *loop, const pt_redis_url *seeds,
                             const int16_t *owner, const pt_acluster_nodes *nodes, int connect_ms,
                             int budget_ms, size_t batch_max);
/* Every check still under way is reported (failed) before this returns. */
void pt_acluster_free(pt_acluster *a);
const struct pt_loop *pt_acluster_loop(const pt_acluster *a);

/* The master a call goes to now (no I/O), -1 when the map knows none. */
int pt_acluster_node_of(const pt_acluster *a, const pt_call *call);

/* Sends the check; fn runs exactly once (o->node: the master that had it
 * last, -1 none), maybe before this returns (no connection, no master for
 * the slot). call must stay valid until then. */
void pt_acluster_check(pt_acluster *a, const pt_call *call, pt_aconn_fn *fn, void *arg);

/* One command for call's slot that is not a check: a quota lease's grant
 * (limiter/quota.c), which is not safe to repeat. argv_of builds it for the
 * master it goes to (module: that master's connection uses the Redis
 * module), again at each hop; what it returns stays valid until the next
 * argv_of or done. MOVED, ASK and TRYAGAIN are followed as a check's are,
 * within the same budget. done runs exactly once, maybe before this returns:
 * with the master's reply (o->status PORTEIRO_OK; o->node the master;
 * o->node_failed when the reply says the node cannot serve, READONLY...),
 * or reply NULL and o the failure (no master for the slot, redirections
 * not settled, no answer within the budget or the connection lost: the
 * command may have run). call must stay valid until then. */
typedef const pt_command *pt_acluster_argv_fn(void *arg, bool module);
typedef void pt_acluster_reply_fn(void *arg, const pt_outcome *o, const redisReply *reply);
void pt_acluster_command(pt_acluster *a, const pt_call *call, pt_acluster_argv_fn *argv_of,
                         pt_acluster_reply_fn *done, void *arg);

/* PINGs every master of this router's map on its own connection. fn runs
 * exactly once, when every PING is answered or has run out of the budget,
 * maybe before this returns: nodes[k] is a master's index, up[k] whether
 * it answered PONG. -1 (fn never runs) when closing or out of memory. */
typedef void pt_acluster_ping_fn(void *arg, const int *nodes, const bool *up, size_t n);
int pt_acluster_ping(pt_acluster *a, pt_acluster_ping_fn *fn, void *arg);
/* The caller held a check back (an open breaker): read the map again
 * (rate-limited), its node may have been replaced. */
void pt_acluster_suspect(pt_acluster *a);
/* pt_aconn_set_module on every master's connection, now and to come; and
 * whether master i's connection uses the module now. */
void pt_acluster_set_module(pt_acluster *a, bool allowed);
bool pt_acluster_node_module(const pt_acluster *a, size_t i);

#endif
