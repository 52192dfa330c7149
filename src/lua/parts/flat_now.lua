-- flat_now.lua (part, see cmake/embed_lua.cmake): now in ms, the argument
-- the caller gave, or the Redis clock when it gave none (absent or ''): one
-- TIME for the fleet. Before it: local call, floor, and now = the argument.
if now and now ~= '' then
  now = now + 0
else
  local t = call('TIME')
  now = t[1] * 1000 + floor(t[2] / 1000)
end
