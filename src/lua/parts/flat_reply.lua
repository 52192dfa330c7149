-- flat_reply.lua (part, see cmake/embed_lua.cmake): the reply of a flat
-- script that allowed (or peeked), from remaining and reset (ms).
-- Allowed: one integer, remaining x 2^32 + reset, when both fit (nearly
-- always): Redis turns a number into a reply far more cheaply than a table,
-- whose every reply first probes it for special fields. Else a table.
if reset < 4294967296 and remaining < 2097152 then
  return remaining * 4294967296 + reset
end
return {remaining, reset}
