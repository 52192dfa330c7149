# Concatenates the Lua sources (in the order given) into one C array, so the
# scripts live as real .lua files and ship inside the library.
# Inputs: -DOUT=file.c -DNAME=symbol -DSOURCES="a.lua;b.lua"
#
# Comment lines and indentation are left out of the embedded text: Redis
# (7.0.12+, 7.2) closes an unauthenticated connection that sends a bulk
# string over 16 KB, and the handshake pipelines SCRIPT LOAD right behind
# AUTH, so a longer script would turn "wrong password" into "connection
# lost". The build fails before that can happen.
set(text "")
foreach(src IN LISTS SOURCES)
  file(READ "${src}" part)
  string(REGEX REPLACE "\n[ \t]*--[^\n]*" "" part "\n${part}")
  string(REGEX REPLACE "\n[ \t]+" "\n" part "${part}")
  string(APPEND text "${part}\n")
endforeach()
string(LENGTH "${text}" len)
if(len GREATER 15360)
  message(FATAL_ERROR "embedded Lua script is ${len} bytes: keep it under 15 KB (see embed_lua.cmake)")
endif()
file(WRITE "${OUT}.tmp" "${text}")
file(READ "${OUT}.tmp" hex HEX)
file(REMOVE "${OUT}.tmp")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from src/lua by cmake/embed_lua.cmake: do not edit. */\n#include <stddef.h>\nconst char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${len};\n")
