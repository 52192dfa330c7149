-- eval_denied_b.lua (part, see cmake/embed_lua.cmake): in an eval() of the
-- general scripts whose limit is the burst B: the answer of a denial or a
-- peek, neither of which writes anything.
if not allowed then
  return false, B, remaining, reset, wait
end
if cost == 0 then
  return true, B, remaining, reset, 0
end
