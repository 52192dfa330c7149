/* conn.h — the blocking Redis connection: connect, AUTH, SELECT,
 * SCRIPT LOAD, then EVALSHA (EVAL once after NOSCRIPT) under a deadline.
 *
 * Time: every call has one total deadline (the command budget; the connect
 * timeout only for pt_redis_connect), enforced with poll() around
 * non-blocking sockets, never per-syscall socket timeouts. A reconnect made
 * inside a call spends that call's budget: a call never blocks longer than
 * its budget, whatever Redis does; a host name is resolved within the
 * deadline too (resolve.h).
 *
 * Recovery: a failure after a request was sent drops the connection and is
 * reported, never replayed (the script may have run). NOSCRIPT is not an
 * execution: those checks are sent again as EVAL, which also puts the script
 * back in Redis's cache. READONLY, LOADING and the like drop the connection so the
 * next call reconnects (perhaps to the new master behind the same name).
 * Writes use MSG_NOSIGNAL: a dead peer never raises SIGPIPE in the host. */
#ifndef PT_BACKEND_REDIS_H
#define PT_BACKEND_REDIS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/call.h"
#include "redis/url.h"

typedef struct pt_redis pt_redis;

pt_redis *pt_redis_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms);
void pt_redis_free(pt_redis *r);

/* Connects now if not connected (budget: the connect timeout). A wrong
 * password or ACL user is PORTEIRO_ERR_AUTH, a database Redis does not have
 * PORTEIRO_ERR_INVALID, with the reason in errbuf. */
porteiro_status pt_redis_connect(pt_redis *r, char *errbuf, size_t errlen);

/* n checks pipelined in one round trip; statuses[i] answers calls[i] (a
 * per-key error such as WRONGTYPE is PORTEIRO_ERR_REDIS there alone).
 * Returns how the round trip went: PORTEIRO_OK when Redis answered, even if
 * some checks failed on their own; otherwise the failure (CONNECT, TIMEOUT,
 * AUTH, PROTOCOL, or REDIS for a node error like READONLY), which the
 * circuit breaker counts. */
porteiro_status pt_redis_check_many(pt_redis *r, const pt_call *calls, size_t n,
                                    porteiro_decision *decisions, porteiro_status *statuses,
                                    char *errbuf, size_t errlen);
/* The same with an explicit deadline (CLOCK_MONOTONIC, us) instead of now
 * plus the command budget. */
porteiro_status pt_redis_check_many_until(pt_redis *r, int64_t deadline_us, const pt_call *calls,
                                          size_t n, porteiro_decision *decisions,
                                          porteiro_status *statuses, char *errbuf, size_t errlen);
/* Checks per script call in pt_redis_check_many (batch.h): 1 (the
 * default) sends each alone; more sends runs of batchable checks together. */
void pt_redis_set_batch_max(pt_redis *r, size_t batch_max);
/* A cluster node: batches only of checks of one slot (conn.c). */
void pt_redis_set_one_slot_batches(pt_redis *r, bool on);
/* allowed (the default): each connection asks the node, in its handshake,
 * whether it has the Redis module porteiro.so (pt_module_probe), and if so
 * sends checks as its commands (pt_command_to_module); a batch whose keys
 * go undeclared stays a script. */
void pt_redis_set_module(pt_redis *r, bool allowed);
/* The connection's checks run as the module's commands now. */
bool pt_redis_uses_module(const pt_redis *r);
/* The command budget, ms. */
int pt_redis_budget_ms(const pt_redis *r);
porteiro_status pt_redis_reset(pt_redis *r, const pt_call *call, char *errbuf, size_t errlen);

/* One arbitrary command (INFO, SCAN...) under the command budget. The caller
 * frees *reply with freeReplyObject; an error reply is PORTEIRO_OK here. */
porteiro_status pt_redis_command(pt_redis *r, int argc, const char **argv, const size_t *argvlen,
                                 redisReply **reply, char *errbuf, size_t errlen);

const pt_redis_url *pt_redis_target(const pt_redis *r);

/* A Redis Cluster redirection or retry request answering one check. */
typedef enum pt_redirect_kind {
    PT_REDIRECT_NONE = 0,
    PT_REDIRECT_MOVED,    /* the slot lives at host:port now */
    PT_REDIRECT_ASK,      /* this once, ask host:port (after ASKING) */
    PT_REDIRECT_TRYAGAIN, /* the slot is migrating: try again shortly */
    PT_REDIRECT_ALONE     /* unrun in a batch over several slots (its slot is
                             not served there): send it again on its own */
} pt_redirect_kind;

typedef struct pt_redirect {
    pt_redirect_kind kind;
    int slot;
    char host[256];
    int port;
} pt_redirect;

/* Reads "MOVED 3999 127.0.0.1:6381", "ASK ...", "TRYAGAIN ..."; false for
 * any other reply. */
bool pt_redirect_parse(const redisReply *reply, pt_redirect *out);

/* pt_redis_check_many_until for a cluster, in two halves, so that it can
 * write to every master before it waits for any. _start connects if need
 * be and writes the checks (statuses[] and redirects[] must stay valid
 * until _finish); _finish reads the answers, sends NOSCRIPT's checks again
 * as EVAL, and returns as pt_redis_check_many_until does, telling per check
 * a redirection Redis answered instead of running it (redirects[i], NONE
 * otherwise: the caller, cluster.c, decides what to do). One pair at a time
 * per node. asking: each command goes after an ASKING (a check sent to the
 * importing node of an ASK). On a cluster node (pt_redis_set_one_slot_batches)
 * flat batches may span slots, their keys undeclared, unless one_slot (or
 * asking); a check such a batch did not run gets PT_REDIRECT_ALONE. */
porteiro_status pt_redis_routed_start(pt_redis *r, int64_t deadline_us, const pt_call *calls,
                                      size_t n, bool asking, bool one_slot,
                                      porteiro_status *statuses, pt_redirect *redirects,
                                      char *errbuf, size_t errlen);
porteiro_status pt_redis_routed_finish(pt_redis *r, int64_t deadline_us,
                                       porteiro_decision *decisions, porteiro_status *statuses,
                                       char *errbuf, size_t errlen);
/* pt_redis_command with an explicit deadline. */
porteiro_status pt_redis_command_until(pt_redis *r, int64_t deadline_us, int argc,
                                       const char **argv, const size_t *argvlen, redisReply **reply,
                                       char *errbuf, size_t errlen);

/* 1 when Redis's maxmemory-policy (seen at the last connect) can evict
 * limiter keys, 0 when not, -1 when unknown (not connected yet, or INFO
 * refused). The first time it is 1, a warning goes to stderr. */
int pt_redis_eviction_risk(const pt_redis *r);
/* Connections established (handshake done) since pt_redis_new. */
uint64_t pt_redis_connects(const pt_redis *r);

#endif
