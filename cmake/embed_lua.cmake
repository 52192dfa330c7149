# Builds the Redis scripts from the Lua sources and writes them, with their
# SHA1 (what EVALSHA names them by), into one C file.
# Inputs: -DOUT=file.c -DCOMMON=common.lua -DENTRY=policy.lua
#         -DALGORITHMS="a.lua;b.lua;..." in porteiro_algorithm order (1..N)
#         -DCHECKS="a.lua;..." flat scripts: algorithms 1..M (M < N), then
#         the flat policy script
#
# Script 0 holds every algorithm (policies that mix them); script k holds
# only algorithm k. A script runs its whole top level on every call, and each
# function it defines is a closure allocated per call, so a check carries only
# the algorithm it uses: this halves the Lua time of a single-limit check.
# Scripts N+1 .. N+M are the flat ones (src/lua/check/): one limit of
# algorithm k, a check or a peek, with no function at all; N+M+1 the flat
# policy of those algorithms. They stand alone.
#
# Comment lines and indentation are left out of the embedded text: Redis
# (7.0.12+, 7.2) closes an unauthenticated connection that sends a bulk
# string over 16 KB, and the handshake pipelines SCRIPT LOAD right behind
# AUTH, so a longer script would turn "wrong password" into "connection
# lost". The build fails before that can happen.
function(read_stripped file out)
  file(READ "${file}" part)
  string(REGEX REPLACE "\n[ \t]*--[^\n]*" "" part "\n${part}")
  string(REGEX REPLACE "\n[ \t]+" "\n" part "${part}")
  if(part MATCHES ";")
    message(FATAL_ERROR "${file}: no ';' in Lua code, please (CMake lists split on it)")
  endif()
  set(${out} "${part}\n" PARENT_SCOPE)
endfunction()

read_stripped("${COMMON}" common)
read_stripped("${ENTRY}" entry)
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
string(APPEND c "const pt_script pt_scripts[PT_SCRIPT_COUNT] = {\n${table}};\n")
file(WRITE "${OUT}" "${c}")
