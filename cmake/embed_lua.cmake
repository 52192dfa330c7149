# Builds the Redis scripts from the Lua sources and writes them, with their
# SHA1 (what EVALSHA names them by), into one C file.
# Inputs: -DOUT=file.c -DCOMMON=common.lua -DENTRY=policy.lua -DBATCH=batch.lua
#         -DBATCH_FLAT=batch_flat.lua
#         -DALGORITHMS="a.lua;b.lua;..." in porteiro_algorithm order (1..N)
#         -DCHECKS="a.lua;..." flat scripts: algorithms 1..M (M < N), then
#         the flat policy script, then the give-back (check/giveback.lua)
#         [-DPARTS=folder] the parts (below), src/lua/parts by default
#
# Script 0 holds every algorithm (policies that mix them); script k holds
# only algorithm k. A script runs its whole top level on every call, and each
# function it defines is a closure allocated per call, so a check carries only
# the algorithm it uses: this halves the Lua time of a single-limit check.
# Scripts N+1 .. N+M are the flat ones (src/lua/check/): one limit of
# algorithm k, a check or a peek, with no function at all; N+M+1 the flat
# policy of those algorithms, N+M+2 the give-back. They stand alone. The
# last single script is the settle script (src/lua/settle.lua with the
# counter algorithms).
#
# Comment lines and indentation are left out of the embedded text: Redis
# (7.0.12+, 7.2) closes an unauthenticated connection that sends a bulk
# string over 16 KB, and the handshake pipelines SCRIPT LOAD right behind
# AUTH, so a longer script would turn "wrong password" into "connection
# lost". The build fails before that can happen.
#
# Shared parts are written once, in src/lua/parts/NAME.lua, and a script
# names one by a line "--@part NAME" (a comment to a Lua reader) where its
# text belongs; parts may name parts. The flat scripts have no function by
# design (a closure is allocated per call), so what they share is pasted,
# not called: the expansion is text, done before the stripping, and the
# script built is as if the part's lines were written there (its comment
# lines and indentation go as well), the same bytes and speed. A part takes
# no parameters: its first lines say which names it reads and sets, and its
# users share them. It may open a block that its user closes (flat_get16)
# or close one its user opened (token_bucket_refill): say so there. The
# batch wrapping below matches lines of the expanded text.
#
# Alone, -DEXPAND=file.lua -DOUT=out.lua [-DPARTS=folder] writes one
# script as it is embedded (bench/run.sh reserve_cost loads the flat ones so).
if(NOT PARTS)
  get_filename_component(PARTS "${CMAKE_CURRENT_LIST_DIR}/../src/lua/parts" ABSOLUTE)
endif()

function(expand_parts file text out)
  set(text "\n${text}\n")
  set(rounds 0)
  while(text MATCHES "\n[ \t]*--@part[ \t]+([A-Za-z0-9_]*)[ \t]*\n")
    set(line "${CMAKE_MATCH_0}")
    set(name "${CMAKE_MATCH_1}")
    if(NOT EXISTS "${PARTS}/${name}.lua")
      message(FATAL_ERROR "${file}: --@part ${name}: no ${PARTS}/${name}.lua")
    endif()
    math(EXPR rounds "${rounds} + 1")
    if(rounds GREATER 100)
      message(FATAL_ERROR "${file}: --@part ${name}: parts that name each other in a circle")
    endif()
    file(READ "${PARTS}/${name}.lua" part)
    string(REGEX REPLACE "\n$" "" part "${part}") # its last line break is the directive's
    string(REPLACE "${line}" "\n${part}\n" text "${text}")
  endwhile()
  if(text MATCHES "--@")
    message(FATAL_ERROR "${file}: a '--@' line that is not '--@part NAME' alone on its line")
  endif()
  string(REGEX REPLACE "^\n" "" text "${text}")
  string(REGEX REPLACE "\n$" "" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(read_stripped file out)
  file(READ "${file}" part)
  expand_parts("${file}" "${part}" part)
  string(REGEX REPLACE "\n[ \t]*--[^\n]*" "" part "\n${part}")
  string(REGEX REPLACE "\n[ \t]+" "\n" part "${part}")
  if(part MATCHES ";")
    message(FATAL_ERROR "${file}: no ';' in Lua code, please (CMake lists split on it)")
  endif()
  set(${out} "${part}\n" PARENT_SCOPE)
endfunction()

if(EXPAND)
  read_stripped("${EXPAND}" text)
  file(WRITE "${OUT}" "${text}")
  return()
endif()

read_stripped("${COMMON}" common)
read_stripped("${ENTRY}" entry)
# quota.lua (a quota lease, docs/quota_leasing.md) sits beside the entry
# point, which calls it: it joins every script that holds policy.lua.
get_filename_component(lua_dir "${ENTRY}" DIRECTORY)
read_stripped("${lua_dir}/quota.lua" quota)
set(entry "${quota}${entry}")
read_stripped("${BATCH}" batch)
read_stripped("${BATCH_FLAT}" batch_flat)
# A batch may hold keys of several slots of one Redis Cluster node.
set(batch_flags "#!lua flags=allow-cross-slot-keys\n")
set(all "${common}")
set(bodies "")
foreach(src IN LISTS ALGORITHMS)
  read_stripped("${src}" part)
  string(APPEND all "${part}")
  list(APPEND bodies "${part}")
endforeach()

set(c "/* Generated from src/lua by cmake/embed_lua.cmake: do not edit. */\n#include \"redis/scripts.h\"\n")
set(table "")
set(index 0)
set(texts "${all}${entry}")
foreach(part IN LISTS bodies)
  list(APPEND texts "${common}${part}${entry}")
endforeach()
foreach(src IN LISTS CHECKS)
  read_stripped("${src}" part)
  list(APPEND texts "${part}")
endforeach()
# The settle script (issue 38), pt_scripts[PT_SCRIPT_SETTLE]: the counter
# algorithms (1..4) and src/lua/settle.lua, its entry point.
read_stripped("${lua_dir}/settle.lua" settle)
list(SUBLIST bodies 0 4 counters)
list(JOIN counters "" counters)
list(APPEND texts "${common}${counters}${settle}")
list(LENGTH texts nscripts)
# Then the batches (pt_batch_scripts): all, then one per algorithm, then
# the flat ones: each flat check script wrapped as a function one(key, o, v0)
# that batch_flat.lua calls per check (the key, its arguments after ARGV[o],
# its state read by one MGET; its SET through SETV): the same code runs
# alone and in batches.
list(APPEND texts "${batch_flags}${all}${batch}")
foreach(part IN LISTS bodies)
  list(APPEND texts "${batch_flags}${common}${part}${batch}")
endforeach()
foreach(src IN LISTS CHECKS)
  get_filename_component(name "${src}" NAME_WE)
  if(name STREQUAL "policy" OR name STREQUAL "giveback") # several limits: not batched flat
    continue()
  endif()
  read_stripped("${src}" part)
  set(body "${part}")
  # What batch_flat.lua already holds once per call leaves the function:
  # the locals of redis.call and math, the clock (NOW), and the arguments
  # as numbers (X[o + k], converted once per call, not once per check).
  string(REPLACE "local call, key, argv = redis.call, KEYS[1], ARGV\n" "" body "${body}")
  string(REGEX REPLACE "local floor(, ceil)? = math.floor(, math.ceil)?\n" "" body "${body}")
  string(REGEX REPLACE "local now = argv\\[[0-9]\\]\nif now[^\n]*then\nnow = now \\+ 0\nelse\nlocal t = call\\('TIME'\\)\nnow = [^\n]*\nend\n"
         "local now = NOW\n" body "${body}")
  # A reservation's max_wait follows now alone, and a check's own
  # arguments in a batch (which has no now): MW is its place there, or
  # false when the batch carries none (batch_flat.lua).
  if(body MATCHES "local mw = argv\\[([0-9])\\]")
    math(EXPR mwi "${CMAKE_MATCH_1} - 1")
    string(REGEX REPLACE "local mw = argv\\[[0-9]\\]" "local mw = MW == ${mwi} and X[o + ${mwi}]"
           body "${body}")
  endif()
  string(REGEX REPLACE "argv\\[([0-9])\\] \\+ 0" "X[o + \\1]" body "${body}")
  string(REPLACE "call('GET', key)" "v0" body "${body}")
  string(REPLACE "call('SET', key, " "SETV(v0, key, " body "${body}")
  # The wrapping relies on those lines: fail here, not in Redis, if one changed.
  if(body MATCHES "KEYS\\[" OR body MATCHES "argv" OR body MATCHES "call\\('(GET|SET|DEL|TIME)'"
     OR body MATCHES "local floor"
     OR NOT body MATCHES "local now = NOW" OR NOT body MATCHES "SETV")
    message(FATAL_ERROR "${src}: cannot wrap it for batches (see embed_lua.cmake)")
  endif()
  string(REPLACE "%%ONE%%" "local function one(key, o, v0)\n${body}end" text "${batch_flat}")
  list(APPEND texts "${batch_flags}${text}")
endforeach()
# Last, pt_batch_scripts[PT_BATCH_SETTLE]: settles batched (settle.lua's
# 'b' form), the settle script's very text (one SHA): its keys are of one
# slot (redis/batch.c never lets a settle batch span slots).
list(APPEND texts "${common}${counters}${settle}")
foreach(text IN LISTS texts)
  string(LENGTH "${text}" len)
  if(len GREATER 15360)
    message(FATAL_ERROR "Lua script ${index} is ${len} bytes: keep it under 15 KB (see embed_lua.cmake)")
  endif()
  string(SHA1 sha "${text}")
  file(WRITE "${OUT}.tmp" "${text}")
  file(READ "${OUT}.tmp" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
  string(APPEND c "static const char script${index}[] = {\n${bytes}0x00};\n")
  string(APPEND table "    {script${index}, ${len}, \"${sha}\"},\n")
  math(EXPR index "${index} + 1")
endforeach()
file(REMOVE "${OUT}.tmp")
string(REGEX MATCHALL "[^\n]+\n" rows "${table}")
set(singles "")
set(batches "")
set(i 0)
foreach(row IN LISTS rows)
  if(i LESS nscripts)
    string(APPEND singles "${row}")
  else()
    string(APPEND batches "${row}")
  endif()
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND c "const pt_script pt_scripts[PT_SCRIPT_COUNT] = {\n${singles}};\n")
string(APPEND c "const pt_script pt_batch_scripts[PT_BATCH_SCRIPT_COUNT] = {\n${batches}};\n")
# The regional pool of a global limit (src/lua/pool.lua, docs/regions.md):
# a script of its own, loaded on first use (EVALSHA, then EVAL on NOSCRIPT).
read_stripped("${lua_dir}/pool.lua" pool)
string(LENGTH "${pool}" len)
string(SHA1 sha "${pool}")
file(WRITE "${OUT}.tmp" "${pool}")
file(READ "${OUT}.tmp" hex HEX)
file(REMOVE "${OUT}.tmp")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(APPEND c "static const char pool_script[] = {\n${bytes}0x00};\n")
string(APPEND c "const pt_script pt_pool_script = {pool_script, ${len}, \"${sha}\"};\n")
file(WRITE "${OUT}" "${c}")
