/* command.h — the wire form of a check: the EVALSHA/EVAL arguments and
 * the parsing of the script's reply. Shared by the blocking and the
 * event-loop connections, so both speak exactly the same protocol. */
#ifndef PT_REDIS_COMMAND_H
#define PT_REDIS_COMMAND_H

#include <hiredis/hiredis.h>

#include "core/call.h"
#include "core/leases.h"
#include "redis/scripts.h"

/* EVALSHA sha nkeys keys... now cost (alg L P B)... [max_wait]; a flat
 * script (one limit): EVALSHA sha 1 key cost L P [B] [now] [max_wait]; a
 * multi-key check: EVALSHA sha nkeys keys... now '' (alg L P B cost
 * shadow)..., 7 a limit (test_multi: eight items); a give-back: EVALSHA
 * sha nkeys keys... now t0 (alg L P B amount)..., 6 a limit. */
#define PT_MAX_ARGS (6 + PORTEIRO_MAX_LIMITS * 7)

typedef struct pt_command {
    int argc;
    const char *argv[PT_MAX_ARGS];
    size_t argvlen[PT_MAX_ARGS];
    char numbers[PT_MAX_ARGS][24];
} pt_command;

/* Where a command's arguments are written as it is built: a pt_command's
 * fixed arrays, or a batch's growing ones (batch.h). numbers[i] backs
 * argv[i] when that argument is a number; room is the caller's business. */
typedef struct pt_args {
    int *argc;
    const char **argv;
    size_t *argvlen;
    char (*numbers)[24];
} pt_args;

void pt_args_add(pt_args a, const char *s, size_t len);
void pt_args_int(pt_args a, long long v);
/* EVALSHA and the script's SHA1, or EVAL and its text (after NOSCRIPT). */
void pt_args_script(pt_args a, const pt_script *s, bool by_sha);

/* The command of the Redis module porteiro.so (module/, docs/module.md)
 * that runs what script s runs, with the same arguments after EVALSHA sha
 * and the same reply; NULL when only the script can (sliding_log, leases,
 * the script of every algorithm). */
const char *pt_module_command(const pt_script *s);
/* Turns arguments built for script s (EVALSHA sha ... or EVAL text ...)
 * into the module command's (NAME ...). False, unchanged, when there is
 * none. */
bool pt_args_to_module(pt_args a, const pt_script *s);
/* The same for a check built by pt_command_check. */
bool pt_command_to_module(pt_command *cmd, const pt_call *call);

/* Asked in a connection's handshake (unless the module is off): COMMAND
 * INFO of every module command, written into argv/argvlen (returns argc).
 * pt_module_present reads the answer: true when the node knows them all,
 * i.e. has porteiro.so loaded. */
#define PT_MODULE_COMMANDS 14
#define PT_MODULE_PROBE_ARGC (2 + PT_MODULE_COMMANDS)
int pt_module_probe(const char **argv, size_t *argvlen);
bool pt_module_present(const redisReply *reply);

/* The smallest embedded script that runs every limit of call. */
const pt_script *pt_script_for(const pt_call *call);

/* Fills cmd for call: EVALSHA of its script (by_sha), or EVAL with the
 * script's text after NOSCRIPT. cmd borrows call's keys: call must outlive
 * cmd. */
void pt_command_check(pt_command *cmd, const pt_call *call, bool by_sha);
/* The same for one lease operation. cmd borrows op. */
void pt_command_lease(pt_command *cmd, const pt_lease_op *op, bool by_sha);
/* Reads the lease script's reply into out. */
porteiro_status pt_reply_lease(const redisReply *reply, const pt_lease_op *op, pt_lease_out *out,
                               char *errbuf, size_t errlen);
/* Every key of call deleted (one script call), a window's marked as reset
 * for the give-backs of quota leases (PT_QUOTA_RESET_SUFFIX). */
void pt_command_reset(pt_command *cmd, const pt_call *call);

/* What an error reply says about the node, which decides the recovery. */
typedef enum pt_reply_kind {
    PT_REPLY_OK = 0,     /* not an error */
    PT_REPLY_NOSCRIPT,   /* the script cache is empty: not executed, send EVAL */
    PT_REPLY_KEY_ERROR,  /* this command failed (WRONGTYPE, a script error);
                            the node is healthy */
    PT_REPLY_NODE_ERROR, /* the node cannot serve us now (READONLY, LOADING,
                            MASTERDOWN, BUSY...): drop the connection */
    PT_REPLY_AUTH_ERROR, /* NOAUTH, WRONGPASS: the credentials */
    PT_REPLY_PERMISSION  /* NOPERM, or a script's call the ACL refuses: the
                            user's rights; the same on every node */
} pt_reply_kind;

pt_reply_kind pt_reply_classify(const redisReply *reply);
/* True if reply is the NOSCRIPT error (script cache empty: not executed). */
bool pt_reply_is_noscript(const redisReply *reply);
/* Turns the script's reply into a decision. On an error reply or a malformed
 * one, returns the status and copies a message into errbuf. */
porteiro_status pt_reply_decision(const redisReply *reply, const pt_call *call,
                                  porteiro_decision *d, char *errbuf, size_t errlen);
/* Reads the reply of a flat script (src/lua/check/) to call (one limit). */
porteiro_status pt_reply_flat(const redisReply *reply, const pt_call *call, porteiro_decision *d,
                              char *errbuf, size_t errlen);
/* Reads the 5 integers per limit of one check's answer, from v on (which
 * holds at least 5 x nlimits replies), into d. */
porteiro_status pt_reply_results(redisReply *const *v, const pt_call *call, porteiro_decision *d,
                                 char *errbuf, size_t errlen);
/* Reads one settle's 6 x nlimits + 1 integers, from v on (a batch of
 * settles: redis/batch.c), into d. */
porteiro_status pt_reply_settle(redisReply *const *v, const pt_call *call, porteiro_decision *d,
                                char *errbuf, size_t errlen);
/* Maps a Redis error reply to a status: PORTEIRO_ERR_AUTH for credential
 * errors, PORTEIRO_ERR_PERMISSION for the ACL's refusals, PORTEIRO_ERR_REDIS
 * for the rest. */
porteiro_status pt_reply_error_status(const redisReply *reply);
/* The end of a command whose reply only says whether it worked: st as the
 * command returned it, or, for an error reply, the error's status with its
 * text in errbuf. Frees reply (which may be NULL). */
porteiro_status pt_reply_done(porteiro_status st, redisReply *reply, char *errbuf, size_t errlen);

/* Reads "maxmemory:N" and "maxmemory_policy:NAME" out of an INFO memory
 * reply. Returns 1 when that policy can evict limiter keys (every key of
 * ours has a TTL, so volatile-* policies evict them too; only noeviction or
 * no maxmemory is safe), 0 when not, -1 when the reply says neither. */
int pt_info_eviction_risk(const redisReply *reply, char *policy, size_t policylen);

/* Bounds on what a server may make a reader hold. hiredis 0.14 allocates an
 * array's elements as soon as it reads the count (up to 2^31 of them: 16
 * GiB) and buffers a bulk string until all of it has come. porteiro's
 * largest reply (a cluster's slot map, a batch of checks) is far smaller. */
#define PT_MAX_REPLY_ELEMENTS (1 << 20)
#define PT_MAX_REPLY_BYTES ((size_t)64 << 20)
/* Makes the reader refuse an array of more than PT_MAX_REPLY_ELEMENTS (a
 * reader error, as for any malformed reply). Call on every reader. */
void pt_reader_bound(redisReader *r);
/* True when the reader holds more than PT_MAX_REPLY_BYTES not yet parsed:
 * no reply of ours is that large, so the connection must be dropped. */
bool pt_reader_overfull(const redisReader *r);

#endif
