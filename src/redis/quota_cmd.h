/* quota_cmd.h — the wire form of a quota lease's grant (docs/quota_leasing.md,
 * src/lua/quota.lua): the script's arguments and the reading of its reply. */
#ifndef PT_REDIS_QUOTA_CMD_H
#define PT_REDIS_QUOTA_CMD_H

#include "core/quota.h"
#include "redis/command.h"

/* The script that grants for call (every limit leasable): one algorithm's
 * own, or the one of them all. */
const pt_script *pt_quota_script(const pt_call *call);

/* A grant's command: its operation argument needs more room than a number. */
typedef struct pt_quota_command {
    pt_command cmd;
    char op[160]; /* 'q', four integers of at most 20 characters, a master */
} pt_quota_command;

/* EVALSHA (by_sha) or EVAL of that script: the call's keys and limits, and
 * ARGV[2] 'q<cost>:<want>:<back>:<t0>', followed by ':<master>' when
 * ask->master names the master that granted the units given back. qc
 * borrows call's keys. */
void pt_command_quota(pt_quota_command *qc, const pt_call *call, const pt_quota_ask *ask,
                      bool by_sha);

/* The same grant as the Redis module's command porteiro.lease (module/,
 * docs/module.md): the command's head replaces EVALSHA sha. */
void pt_quota_to_module(pt_quota_command *qc);

/* What a grant's reply says besides the check's decision. */
typedef struct pt_quota_reply {
    int64_t granted;                      /* k, 0 when denied */
    int64_t now_ms;                       /* Redis's clock */
    char master[PT_QUOTA_MASTER_LEN + 1]; /* the replication id of the
                                             master that granted ("" none) */
} pt_quota_reply;

/* Reads the grant's reply: the check of cost k as a decision into d, the
 * rest into *q. A reply that contradicts itself (granted units with a
 * denial, more than asked for, fewer than the cost) is
 * PORTEIRO_ERR_PROTOCOL. */
porteiro_status pt_reply_quota(const redisReply *reply, const pt_call *call,
                               const pt_quota_ask *ask, porteiro_decision *d, pt_quota_reply *q,
                               char *errbuf, size_t errlen);

/* WAIT replicas timeout_ms: a grant of a lease with replicas (after it, on
 * the connection that sent it). */
void pt_command_wait(pt_command *cmd, int64_t replicas, int64_t timeout_ms);

/* The replicas WAIT says acknowledged, -1 for anything but an integer. */
int64_t pt_reply_wait(const redisReply *reply);

#endif
