/* state.h — a limiter key inside Redis: its packed state read and written
 * exactly as the scripts do (src/lua/common.lua, the flat scripts in src/lua/check).
 *
 * The value is two or three IEEE doubles, little-endian (Lua's
 * struct.pack('<dd') / '<ddd'): 16 bytes for fixed_window and
 * token_bucket, 24 for gcra and sliding_window, each an integer. A write
 * is SET value with an absolute expiry, replicated as exactly that
 * (SET key value PXAT t), or DEL: the effects, never the command, so a
 * replica and the AOF hold the master's bytes whatever their clocks. */
#ifndef PM_STATE_H
#define PM_STATE_H

#include <stdbool.h>

#include "core/algorithms.h"
#include "redismodule_api.h"

/* The reply texts shared with the scripts. */
#define PM_ERR_WRONGTYPE "WRONGTYPE Operation against a key holding the wrong kind of value"
#define PM_ERR_NOT_STATE "WRONGTYPE porteiro: the limiter key holds no limiter state"

typedef struct pm_key {
    RedisModuleString *name;
    RedisModuleKey *key; /* open for reading and writing until pm_key_close */
    bool present;        /* the key holds a state */
    pt_state st;         /* when present */
} pm_key;

/* The bytes of algorithm a's state: 16 or 24. */
size_t pm_state_size(porteiro_algorithm a);

/* Opens name and reads its state for limit l (valid). exact: the value must
 * have a's size (the flat scripts); else 16 or 24 bytes (common.lua's
 * load_state, c = 0 for 16). Returns NULL, or the error text to reply (the
 * key is then closed): another type, a value of another size, or numbers
 * no script could have written (which the arithmetic must never see). */
const char *pm_key_open(RedisModuleCtx *ctx, RedisModuleString *name, const porteiro_limit *l,
                        bool exact, pm_key *k);

/* Stores st for algorithm a to expire ttl_ms after clock_ms (the server's
 * clock, ms since the epoch: what SET ... PX ttl in a script means), and
 * replicates that write with the absolute time; ttl_ms <= 0 deletes the key
 * instead (DEL, replicated when there was a key). */
void pm_key_store(RedisModuleCtx *ctx, pm_key *k, porteiro_algorithm a, const pt_state *st,
                  int64_t ttl_ms, int64_t clock_ms);

void pm_key_close(pm_key *k);

#endif
