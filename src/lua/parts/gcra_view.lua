-- gcra_view.lua (part, see cmake/embed_lua.cmake): a flat script's view of
-- the stored TAT v (24 bytes, checked): rel = TAT - now in ticks of 1/L ms
-- within a bound, beyond = whole ms of a TAT further ahead (a clock that
-- went back); both stay 0 for a TAT in the past. Needs now, L, tau = B x P
-- and the locals rel and beyond, 0.
local a, b, c = struct.unpack('<ddd', v)
--@part gcra_relimit
local ahead = a - now
if ahead >= 0 then
  local bound = ceil(tau / L) + 1
  if ahead > bound then
    beyond = ahead - bound
    ahead = bound
  end
  rel = ahead * L + b
end
