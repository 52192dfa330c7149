/* api.c — the module API's function pointers and their filling at load
 * (redismodule_api.h). */
#include "redismodule_api.h"

#define PM_API_DEFINE(ret, name, params) ret(*RedisModule_##name) params;
PM_API(PM_API_DEFINE)
#undef PM_API_DEFINE

/* The server's lookup: the name of an API function, and where to put it. */
typedef int (*pm_get_api_fn)(const char *name, void *out);

int pm_api_load(RedisModuleCtx *ctx, const char *name, int version) {
    /* The context's first member is the lookup function itself (the
     * documented way a module bootstraps its API). Read as bytes: the
     * context is otherwise opaque. */
    pm_get_api_fn get;
    void *first = *(void **)ctx;
    _Static_assert(sizeof(get) == sizeof(first), "function and data pointers differ in size");
    __builtin_memcpy(&get, &first, sizeof(get));

    int missing = 0;
#define PM_API_FETCH(ret, fn, params)                                                              \
    if (get("RedisModule_" #fn, (void *)&RedisModule_##fn) != REDISMODULE_OK)                      \
        missing++;
    PM_API(PM_API_FETCH)
#undef PM_API_FETCH
    if (missing > 0)
        return REDISMODULE_ERR;
    if (RedisModule_IsModuleNameBusy(name))
        return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, name, version, REDISMODULE_APIVER_1);
    return REDISMODULE_OK;
}
