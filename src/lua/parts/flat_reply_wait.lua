-- flat_reply_wait.lua (part, see cmake/embed_lua.cmake): the reply of a
-- flat script that allowed after a wait (ms), from wait and reset (ms).
-- A reservation: one negative integer, -1 - (wait x 2^32 + reset), when
-- it fits (nothing is left now: remaining 0), else a table.
if wait < 2097152 and reset < 4294967296 then
  return -1 - (wait * 4294967296 + reset)
end
return {0, reset, -1 - wait}
