-- eval_peek.lua (part, see cmake/embed_lua.cmake): in an eval() of the
-- general scripts whose limit is L, once it allowed: a peek's answer (it
-- writes nothing), and a reservation's (nothing is left now).
if cost == 0 then
  return true, L, remaining, reset, 0
end
if wait > 0 then
  remaining = 0
end
