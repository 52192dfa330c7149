/* scripts.h — the Redis scripts embedded at build time (build/lua_scripts.c,
 * from src/lua by cmake/embed_lua.cmake), with the SHA1 EVALSHA names them by.
 *
 * pt_scripts[0] holds every algorithm; pt_scripts[a] only algorithm a (a
 * porteiro_algorithm). All share one entry point and one calling convention
 * (src/lua/policy.lua); a check uses the smallest script that can run it. */
#ifndef PT_SCRIPTS_H
#define PT_SCRIPTS_H

#include <stddef.h>

#define PT_SCRIPT_ALL 0
#define PT_SCRIPT_COUNT 7 /* "all" + the six algorithms */

typedef struct pt_script {
    const char *text;
    size_t len;
    const char *sha; /* 40 hex digits */
} pt_script;

extern const pt_script pt_scripts[PT_SCRIPT_COUNT];

#endif
