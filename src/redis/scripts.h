/* scripts.h — the Redis scripts embedded at build time (build/lua_scripts.c,
 * from src/lua by cmake/embed_lua.cmake), with the SHA1 EVALSHA names them by.
 *
 * pt_scripts[0] holds every algorithm; pt_scripts[a] only algorithm a (a
 * porteiro_algorithm); pt_scripts[PT_SCRIPT_CHECK(a)] is the flat script of
 * one limit of algorithm a, a check or a peek (src/lua/check/), for the
 * algorithms below PT_SCRIPT_CHECKED, and pt_scripts[PT_SCRIPT_POLICY] the
 * flat script of a policy of those algorithms (and
 * pt_scripts[PT_SCRIPT_GIVEBACK] a give-back). The flat single-limit
 * scripts take shorter arguments and give a shorter reply
 * (src/redis/command.c); the others share the calling convention of
 * src/lua/policy.lua. A check uses the cheapest script that can run it. */
#ifndef PT_SCRIPTS_H
#define PT_SCRIPTS_H

#include <stddef.h>

#define PT_SCRIPT_ALL 0
#define PT_SCRIPT_CHECK(a) (6 + (a)) /* fixed_window .. sliding_window */
#define PT_SCRIPT_CHECKED 5          /* algorithms 1..4 have a flat script */
#define PT_SCRIPT_POLICY 11
/* The give-back of a multi-key check over several Redis Cluster slots
 * (src/lua/check/giveback.lua, limiter/spread.h). Loaded in the handshake
 * like the others: a check sent after a give-back on one connection must
 * find it done, which a NOSCRIPT and its EVAL behind that check would not
 * give. */
#define PT_SCRIPT_GIVEBACK 12
#define PT_SCRIPT_SETTLE 13 /* a settle (src/lua/settle.lua, issue 38) */
#define PT_SCRIPT_COUNT                                                                            \
    14 /* "all", six algorithms, four flat checks, flat                                            \
          policy, give-back, settle */

typedef struct pt_script {
    const char *text;
    size_t len;
    const char *sha; /* 40 hex digits */
} pt_script;

extern const pt_script pt_scripts[PT_SCRIPT_COUNT];
/* The batch entry points over the same algorithms: pt_batch_scripts[0]
 * all of them, [a] only algorithm a (src/lua/batch.lua); then the flat
 * batches. Many checks in one call. */
#define PT_BATCH_SCRIPT_COUNT 12
/* pt_batch_scripts[PT_BATCH_FLAT(a)]: checks of one limit of algorithm a
 * (below PT_SCRIPT_CHECKED), each by its flat script (src/lua/batch_flat.lua). */
#define PT_BATCH_FLAT(a) (6 + (a))
/* Settles of single checks (issue 38), many in one call: the settle
 * script's own text, in its batch form (src/lua/settle.lua). */
#define PT_BATCH_SETTLE 11
extern const pt_script pt_batch_scripts[PT_BATCH_SCRIPT_COUNT];
/* The regional pool of a global limit (src/lua/pool.lua, docs/regions.md):
 * not in the handshake; EVALSHA, then EVAL once on NOSCRIPT. */
extern const pt_script pt_pool_script;

/* Every connection loads the single scripts in its handshake; a batch
 * script just before its first use on the connection (redis/batch.h). */
#define PT_HANDSHAKE_SCRIPTS PT_SCRIPT_COUNT
static inline const pt_script *pt_handshake_script(size_t i) {
    return &pt_scripts[i];
}

#endif
