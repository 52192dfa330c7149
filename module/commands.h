/* commands.h — the module's commands: each takes the arguments the matching
 * script takes after EVALSHA sha (numkeys, keys, then the script's ARGV)
 * and gives the same reply, so the client changes only the command's head
 * (src/redis/command.c, pt_module_command). See docs/module.md.
 *
 *   porteiro.fixed_window   1 key cost L P [now]        src/lua/check/fixed_window.lua
 *   porteiro.token_bucket   1 key cost L P B [now]      src/lua/check/token_bucket.lua
 *   porteiro.gcra           1 key cost L P B [now]      src/lua/check/gcra.lua
 *   porteiro.sliding_window 1 key cost L P [now]        src/lua/check/sliding_window.lua
 *   porteiro.policy         n keys now cost (alg L P B)xn   src/lua/check/policy.lua
 *   porteiro.check          the same; cost < 0 refunds      src/lua/policy.lua
 *   porteiro.batch          n keys m (now cost k (alg L P B)xk)xm   src/lua/batch.lua
 *   porteiro.batch.ALG      n keys now s k [keys] args      src/lua/batch_flat.lua
 *   porteiro.reset          n keys                      DEL of the keys
 *   porteiro.lease          n keys now q... (alg L P B)xn   src/lua/quota.lua
 *   porteiro.settle         n keys now delta (alg L P B)xn [age]  src/lua/settle.lua
 *
 * Algorithms 1-4 (the counters); sliding_log and leases stay with the
 * scripts. now: ms since the epoch, or '' (absent in the single checks)
 * for the server's clock. */
#ifndef PM_COMMANDS_H
#define PM_COMMANDS_H

#include "redismodule_api.h"

typedef struct pm_command {
    const char *name;
    RedisModuleCmdFunc fn;
    const char *flags;
    int firstkey, lastkey, keystep; /* 0, 0, 0: keys named through getkeys-api */
} pm_command;

/* Every command, ended by a NULL name. */
extern const pm_command pm_commands[];

#endif
