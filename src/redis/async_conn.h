/* async_conn.h — the event-loop connection to one Redis node.
 *
 * One connection of its own on the caller's loop (alink.h: a socket, plain
 * or TLS, and hiredis's reply parser): connect, AUTH, SELECT and SCRIPT LOAD
 * written first, then the checks of each loop pass as EVALSHA (EVAL once
 * after NOSCRIPT), in one write, under one deadline timer per connection.
 * It reports, for each check, exactly once, what happened on the wire; what
 * a failure becomes (breaker, fallback, stats) is the caller's business
 * (src/limiter/decide.c). A TLS failure is a failure of the node.
 *
 * A check that timed out is never replayed: the connection it was sent on is
 * dropped (the script may have run), and a new one is made after a capped
 * back-off. Loop thread only. */
#ifndef PT_REDIS_ASYNC_CONN_H
#define PT_REDIS_ASYNC_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/call.h"
#include "redis/conn.h"
#include "redis/url.h"

struct pt_loop;
typedef struct pt_aconn pt_aconn;

/* How one check went on the wire. */
typedef struct pt_outcome {
    porteiro_status status; /* PORTEIRO_OK: the decision is valid */
    bool sent;              /* it reached the socket (latency_us is measured) */
    bool timeout;           /* no answer within the budget */
    bool node_failed;       /* the node failed us (no answer, lost connection,
                               READONLY, credentials), not just this key */
    bool again;             /* one more check of a failure already reported
                               (one stall timed out every check in flight, one
                               lost connection took them all): one failure of
                               the node, counted once by the breaker */
    int64_t latency_us;     /* from send to answer, when sent */
    char why[160];          /* the reason of a failure, for logs and errmsg */
    /* A cluster node answered MOVED, ASK or TRYAGAIN instead of running the
     * check (status PORTEIRO_ERR_REDIS, node_failed false): the cluster
     * router (acluster.c) sends it again; kind NONE otherwise. */
    pt_redirect redirect;
    int node; /* the cluster master that had the check (acluster.c), -1 none */
} pt_outcome;

/* Called once per check, on the loop thread. call is the caller's again. */
typedef void pt_aconn_fn(void *arg, const pt_outcome *o, const porteiro_decision *d);

/* Starts connecting now. NULL on ENOMEM. budget_ms bounds each check from
 * its send; connect_ms bounds a connection's handshake. Checks asked for
 * during one pass of the loop leave together at its end, runs of batchable
 * ones (redis/batch.h) as batches of up to batch_max (1: one call each). */
pt_aconn *pt_aconn_new(const struct pt_loop *loop, const pt_redis_url *url, int connect_ms,
                       int budget_ms, size_t batch_max);
/* Closes the connection: every check still in flight is reported failed
 * (its callback runs before this returns). */
void pt_aconn_free(pt_aconn *c);

/* Queues the check for the end of this pass of the loop. call must stay
 * valid until fn has been called. fn runs exactly once, maybe before this
 * returns (no connection: a failure). */
void pt_aconn_check(pt_aconn *c, const pt_call *call, pt_aconn_fn *fn, void *arg);

/* How a check travels (pt_aconn_send). */
typedef enum pt_send_mode {
    PT_SEND_ANY = 0, /* alone or in a batch */
    PT_SEND_ALONE,   /* its own script call, keys declared (a cluster's batch
                        over slots did not run it: PT_REDIRECT_ALONE) */
    PT_SEND_ASKING   /* alone, just after an ASKING (a cluster's ASK) */
} pt_send_mode;

/* pt_aconn_check with its own budget (budget_us from now, instead of the
 * connection's) and mode. */
void pt_aconn_send(pt_aconn *c, const pt_call *call, pt_send_mode mode, int64_t budget_us,
                   pt_aconn_fn *fn, void *arg);

/* A cluster node: the checks of a pass are sorted by slot; a batch holds
 * checks of one slot (a script whose KEYS span slots is CROSSSLOT), except
 * a flat batch (redis/batch.h, pt_batch_spans_slots), which may span slots
 * with its keys undeclared. A check such a batch did not run (its slot is
 * not served there) is reported unrun with redirect PT_REDIRECT_ALONE. */
void pt_aconn_set_one_slot_batches(pt_aconn *c, bool on);
/* As pt_redis_set_module (conn.h): allowed (the default), the handshake
 * asks whether the node has the Redis module and the checks sent once it
 * said yes are its commands. pt_aconn_uses_module: they are now. */
void pt_aconn_set_module(pt_aconn *c, bool allowed);
bool pt_aconn_uses_module(const pt_aconn *c);

/* One command that is safe to repeat (CLUSTER SHARDS): fn gets the reply,
 * or NULL when there was none within the connection's budget (the
 * connection is kept). fn runs exactly once, maybe before this returns. */
typedef void pt_aconn_reply_fn(void *arg, const redisReply *reply);
void pt_aconn_command(pt_aconn *c, int argc, const char *const *argv, const size_t *argvlen,
                      pt_aconn_reply_fn *fn, void *arg);

/* pt_aconn_command for a cluster's router (topology/acluster.c): with an
 * ASKING just ahead of it (asking: an ASK redirection), and budget_us from
 * now instead of the connection's budget. */
void pt_aconn_command_send(pt_aconn *c, bool asking, int64_t budget_us, int argc,
                           const char *const *argv, const size_t *argvlen, pt_aconn_reply_fn *fn,
                           void *arg);

/* The loop it runs on (the handle's). */
const struct pt_loop *pt_aconn_loop(const pt_aconn *c);

#endif
