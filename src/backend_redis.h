/* backend_redis.h — the blocking Redis connection: connect, AUTH, SELECT,
 * SCRIPT LOAD, then EVALSHA (EVAL once after NOSCRIPT) under a deadline.
 *
 * Every exchange has a total deadline enforced with poll(), not per-syscall
 * socket timeouts: a check never blocks longer than its budget. A failure
 * after a request was sent drops the connection and is reported, never
 * replayed (the script may have run). */
#ifndef PT_BACKEND_REDIS_H
#define PT_BACKEND_REDIS_H

#include <hiredis/hiredis.h>

#include "call.h"
#include "redis_url.h"

typedef struct pt_redis pt_redis;

pt_redis *pt_redis_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms);
void pt_redis_free(pt_redis *r);

/* Connects now if not connected (budget: the connect timeout). */
porteiro_status pt_redis_connect(pt_redis *r, char *errbuf, size_t errlen);

/* n checks pipelined in one round trip; statuses[i] answers calls[i].
 * Returns the first failing status, or PORTEIRO_OK. */
porteiro_status pt_redis_check_many(pt_redis *r, const pt_call *calls, size_t n,
                                    porteiro_decision *decisions, porteiro_status *statuses,
                                    char *errbuf, size_t errlen);
porteiro_status pt_redis_reset(pt_redis *r, const pt_call *call, char *errbuf, size_t errlen);

/* One arbitrary command (INFO, SCAN...) under the command budget. The caller
 * frees *reply with freeReplyObject. */
porteiro_status pt_redis_command(pt_redis *r, int argc, const char **argv, const size_t *argvlen,
                                 redisReply **reply, char *errbuf, size_t errlen);

/* The SHA1 of the script as Redis reported it ("" before the first load). */
const char *pt_redis_sha(const pt_redis *r);
const pt_redis_url *pt_redis_target(const pt_redis *r);

#endif
