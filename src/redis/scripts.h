/* scripts.h — the Redis scripts embedded at build time (build/lua_scripts.c,
 * from src/lua by cmake/embed_lua.cmake), with the SHA1 EVALSHA names them by.
 *
 * pt_scripts[0] holds every algorithm; pt_scripts[a] only algorithm a (a
 * porteiro_algorithm); pt_scripts[PT_SCRIPT_CHECK(a)] is the flat script of
 * one limit of algorithm a, a check or a peek (src/lua/check/), for the
 * algorithms below PT_SCRIPT_CHECKED. All share one calling convention
 * (src/lua/policy.lua); a check uses the smallest script that can run it. */
#ifndef PT_SCRIPTS_H
#define PT_SCRIPTS_H

#include <stddef.h>

#define PT_SCRIPT_ALL 0
#define PT_SCRIPT_CHECK(a) (6 + (a)) /* fixed_window .. sliding_window */
#define PT_SCRIPT_CHECKED 5             /* algorithms 1..4 have a flat script */
#define PT_SCRIPT_COUNT 11 /* "all" + the six algorithms + four flat checks */

typedef struct pt_script {
    const char *text;
    size_t len;
    const char *sha; /* 40 hex digits */
} pt_script;

extern const pt_script pt_scripts[PT_SCRIPT_COUNT];

#endif
