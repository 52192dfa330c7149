-- sliding_window_view.lua (part, see cmake/embed_lua.cmake): a flat
-- script's view of the stored counters v (24 bytes, checked): w, the
-- window judged, its count cur and the previous one's, prev. Needs w =
-- floor(now / P) and shift, cur, prev = 0.
local a, b, c = struct.unpack('<ddd', v)
-- A stored window ahead of now (a reservation reached into it, or the
-- clock went back) is judged from its start, shift ms later: nothing
-- passes before it begins.
if a > w then
  shift = a * P - now
  w = a
end
if a == w then
  cur, prev = b, c
elseif a == w - 1 then
  prev = b
end
