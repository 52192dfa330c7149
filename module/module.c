/* module.c — porteiro.so, the Redis module: its entry point. Loaded with
 * `loadmodule /path/porteiro.so` (or MODULE LOAD); see docs/module.md. */
#include "commands.h"

/* The one symbol the server looks up (the others are hidden). */
__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc);

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (pm_api_load(ctx, "porteiro", 1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    for (const pm_command *c = pm_commands; c->name != NULL; c++)
        if (RedisModule_CreateCommand(ctx, c->name, c->fn, c->flags, c->firstkey, c->lastkey,
                                      c->keystep) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
