-- fixed_window_view.lua (part, see cmake/embed_lua.cmake): a flat script's
-- view of the stored window v (16 bytes, checked): w, the window judged,
-- and count, its units. Needs w = floor(now / P) and count = 0.
local a, b = struct.unpack('<dd', v)
-- A stored window ahead of now (a reservation reached into it, or the
-- clock went back) is judged: nothing passes before it begins.
if a > w then
  w = a
end
if a == w then
  count = b
end
