/* redismodule_api.h — the part of Redis's module API porteiro.so uses,
 * declared by the project (Debian's redis-server ships no module header).
 *
 * A module gets no symbols from the server at link time: at load, Redis
 * calls RedisModule_OnLoad with a context whose first word is a pointer to
 * the server's "get API" function; asking it for "RedisModule_<Name>" fills
 * a function pointer. Every function the module calls is one such pointer,
 * listed once below (PM_API) and filled by pm_api_load (api.c). A test may
 * instead point them at fakes of its own (tests/module/test_module_api.c).
 *
 * The signatures and constants follow the public module API reference of
 * Redis 7.0 ("Modules API reference", redis.io); only what is used is here. */
#ifndef PM_REDISMODULE_API_H
#define PM_REDISMODULE_API_H

#include <stddef.h>
#include <stdint.h>

/* Opaque server objects: the module only holds pointers to them. */
typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;
typedef long long mstime_t;

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* Return codes of most calls. */
#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
/* The API version the module asks for at load. */
#define REDISMODULE_APIVER_1 1
/* Key open modes (RedisModule_OpenKey) and DMA modes (RedisModule_StringDMA). */
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)
/* RedisModule_KeyType: an absent key, a string; anything else is another type. */
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_STRING 1
/* RedisModule_ReplyWithArray: the length follows (RedisModule_ReplySetArrayLength). */
#define REDISMODULE_POSTPONED_LEN -1
/* RedisModule_GetContextFlags: the server runs in cluster mode. */
#define REDISMODULE_CTX_FLAGS_CLUSTER (1 << 5)

/* X(return type, name without the RedisModule_ prefix, parameters). */
#define PM_API(X)                                                                                  \
    X(int, SetModuleAttribs, (RedisModuleCtx * ctx, const char *name, int ver, int apiver))        \
    X(int, IsModuleNameBusy, (const char *name))                                                   \
    X(int, CreateCommand,                                                                          \
      (RedisModuleCtx * ctx, const char *name, RedisModuleCmdFunc cmdfunc, const char *strflags,   \
       int firstkey, int lastkey, int keystep))                                                    \
    X(int, IsKeysPositionRequest, (RedisModuleCtx * ctx))                                          \
    X(void, KeyAtPos, (RedisModuleCtx * ctx, int pos))                                             \
    X(int, GetContextFlags, (RedisModuleCtx * ctx))                                                \
    X(int, WrongArity, (RedisModuleCtx * ctx))                                                     \
    X(int, ReplyWithLongLong, (RedisModuleCtx * ctx, long long ll))                                \
    X(int, ReplyWithError, (RedisModuleCtx * ctx, const char *err))                                \
    X(int, ReplyWithArray, (RedisModuleCtx * ctx, long len))                                       \
    X(void, ReplySetArrayLength, (RedisModuleCtx * ctx, long len))                                 \
    X(int, ReplyWithStringBuffer, (RedisModuleCtx * ctx, const char *buf, size_t len))             \
    X(const char *, StringPtrLen, (const RedisModuleString *str, size_t *len))                     \
    X(int, StringToLongLong, (const RedisModuleString *str, long long *ll))                        \
    X(void *, OpenKey, (RedisModuleCtx * ctx, RedisModuleString * keyname, int mode))              \
    X(void, CloseKey, (RedisModuleKey * kp))                                                       \
    X(int, KeyType, (RedisModuleKey * kp))                                                         \
    X(int, DeleteKey, (RedisModuleKey * key))                                                      \
    X(char *, StringDMA, (RedisModuleKey * key, size_t * len, int mode))                           \
    X(int, StringTruncate, (RedisModuleKey * key, size_t newlen))                                  \
    X(int, SetAbsExpire, (RedisModuleKey * key, mstime_t expire))                                  \
    X(int, Replicate, (RedisModuleCtx * ctx, const char *cmdname, const char *fmt, ...))           \
    X(long long, Milliseconds, (void))                                                             \
    X(RedisModuleString *, CreateString, (RedisModuleCtx * ctx, const char *ptr, size_t len))      \
    X(void, FreeString, (RedisModuleCtx * ctx, RedisModuleString * str))                           \
    X(RedisModuleServerInfoData *, GetServerInfo, (RedisModuleCtx * ctx, const char *section))     \
    X(void, FreeServerInfo, (RedisModuleCtx * ctx, RedisModuleServerInfoData * data))              \
    X(const char *, ServerInfoGetFieldC, (RedisModuleServerInfoData * data, const char *field))

/* One pointer per function, named as Redis names it. */
#define PM_API_DECLARE(ret, name, params) extern ret(*RedisModule_##name) params;
PM_API(PM_API_DECLARE)
#undef PM_API_DECLARE

/* Fills every pointer from the server's "get API" function found in ctx
 * (what RedisModule_OnLoad receives), then names the module. Returns
 * REDISMODULE_OK, or REDISMODULE_ERR when the server lacks a function or
 * the name is taken. */
int pm_api_load(RedisModuleCtx *ctx, const char *name, int version);

#endif
