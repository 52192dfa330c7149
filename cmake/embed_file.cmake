# Embeds one file in the binary as a C array (the admin page, daemon/admin/).
# Inputs: -DIN=file -DOUT=file.c -DNAME=symbol. Writes
#   const unsigned char NAME[] = {...}; const size_t NAME_len = N;
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed_file.cmake: do not edit. */\n#include <stddef.h>\nconst unsigned char ${NAME}[] = {\n${body}0x00};\nconst size_t ${NAME}_len = ${bytes};\n")
