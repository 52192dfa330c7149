-- gcra_relimit.lua (part, see cmake/embed_lua.cmake): a stored TAT of a,
-- whole ms, and b ticks of 1/c ms, seen under the limit L.
-- Ticks of another L (the limit was changed): round the TAT up to its
-- next whole ms, never earlier.
if c ~= L then
  if b > 0 then
    a = a + 1
  end
  b = 0
end
