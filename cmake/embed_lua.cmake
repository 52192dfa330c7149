# Concatenates the Lua sources (in the order given) into one C array, so the
# scripts live as real .lua files and ship inside the library.
# Inputs: -DOUT=file.c -DNAME=symbol -DSOURCES="a.lua;b.lua"
set(text "")
foreach(src IN LISTS SOURCES)
  file(READ "${src}" part)
  string(APPEND text "${part}\n")
endforeach()
string(LENGTH "${text}" len)
file(WRITE "${OUT}.tmp" "${text}")
file(READ "${OUT}.tmp" hex HEX)
file(REMOVE "${OUT}.tmp")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from src/lua by cmake/embed_lua.cmake: do not edit. */\n#include <stddef.h>\nconst char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${len};\n")
