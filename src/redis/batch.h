/* batch.h — the wire form of a batch: many checks in one EVALSHA of a batch
 * script (src/lua/batch.lua), and the reading of its reply.
 *
 * Each check in a batch is decided exactly as alone, all-or-nothing, in
 * order; the batch is not atomic as a whole. A check that fails alone
 * (WRONGTYPE) fails alone; an error of the whole call (NOSCRIPT, READONLY,
 * a timeout) is every check's. Bounded (PT_BATCH_MAX_CHECKS, _BYTES) so that
 * no call holds Redis long: see docs/algorithms.md, "Batches". */
#ifndef PT_REDIS_BATCH_H
#define PT_REDIS_BATCH_H

#include <hiredis/hiredis.h>
#include <stdbool.h>

#include "core/call.h"

/* The most checks one call carries, the most keys (limits) and the most
 * bytes of keys: at about 6 us of Redis time per limit (measured, gcra),
 * 256 keys hold Redis for about 1.5 ms at most. */
#define PT_BATCH_MAX_CHECKS 256
#define PT_BATCH_MAX_KEYS 256
#define PT_BATCH_MAX_KEY_BYTES (64 * 1024)

typedef struct pt_batch_cmd {
    int argc, cap;
    const char **argv;
    size_t *argvlen;
    char (*numbers)[24];
} pt_batch_cmd;

/* True when call may travel in a batch: a check or peek (not a refund)
 * whose work is bounded (no sliding_log: its cost is O(cost) entries). */
bool pt_batchable(const pt_call *call);

/* How many of calls[0..n) (all batchable) the next batch takes: at most
 * max_checks, PT_BATCH_MAX_KEYS and PT_BATCH_MAX_KEY_BYTES, at least 1. */
size_t pt_batch_take(const pt_call *const *calls, size_t n, size_t max_checks);

/* True when call's batch may hold keys of several slots of one Redis
 * Cluster node (a flat batch, src/lua/batch_flat.lua), passed undeclared. */
bool pt_batch_spans_slots(const pt_call *call);

/* Fills cmd with EVALSHA (by_sha) or EVAL of the smallest batch script for
 * calls[0..n). undeclared (only where pt_batch_spans_slots): the keys go
 * as arguments, not KEYS, so that they may span slots of one cluster node.
 * cmd borrows the calls' keys. Returns 0, or -1 on ENOMEM. */
int pt_batch_command(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n, bool by_sha,
                     bool undeclared);
void pt_batch_cmd_free(pt_batch_cmd *cmd);
/* Turns cmd, built by pt_batch_command for calls[0..n) with declared keys,
 * into the Redis module's command (docs/module.md). False, unchanged, when
 * the module has none for it. */
bool pt_batch_to_module(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n);

/* The index in pt_batch_scripts of the script pt_batch_command uses for
 * calls[0..n). A connection loads it (SCRIPT LOAD, in the same pipeline,
 * ahead of the batch) the first time it sends it: checks are then never
 * reordered by a NOSCRIPT, which only a flush or a restart can cause and
 * which then hits every call of the pipeline alike. */
size_t pt_batch_script_index(const pt_call *const *calls, size_t n);

/* statuses[i] of a check an undeclared batch did not run: its key is not
 * served by the node (a slot moved or migrating). Sent again alone. */
#define PT_BATCH_NOT_HERE ((porteiro_status)-50)

/* Splits the batch's reply: statuses[i] and decisions[i] answer calls[i].
 * An error reply (the whole call failed) is returned, with the message,
 * and leaves statuses alone; otherwise PORTEIRO_OK (some checks may have
 * failed alone: their statuses say so). */
porteiro_status pt_batch_reply(const redisReply *reply, const pt_call *const *calls, size_t n,
                               porteiro_decision *decisions, porteiro_status *statuses,
                               char *errbuf, size_t errlen);

#endif
