-- batch_flat.lua: many checks of one limit of one algorithm in one call,
-- each decided by that algorithm's flat script (src/lua/check/), which the
-- build wraps as one(key, o, v0) (cmake/embed_lua.cmake): the same code as a
-- single check, not a copy. Each state is read with its own GET, in order
-- (MGET would hide a key of another type, which SET would then overwrite),
-- and through pcall, so that such a key fails its own check alone.
--
-- KEYS     one key per check
-- ARGV[1]  now in ms, or '' for the Redis clock (read once)
-- ARGV[2]  s, the arguments per check; then s per check: cost, L, P[, B]
-- Returns per check what its flat script returns alone.
-- NOW is declared by the build above one(), which reads it.
NOW = tonumber(ARGV[1])
if NOW == nil then
  local t = redis.call('TIME')
  NOW = t[1] * 1000 + math.floor(t[2] / 1000)
end
local s = ARGV[2] + 0
local pcall_redis = redis.pcall
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local v = pcall_redis('GET', key)
  if type(v) == 'table' then
    out[i] = v -- {err = 'WRONGTYPE ...'}: this check fails alone
  else
    out[i] = one(key, 2 + (i - 1) * s, v)
  end
end
return out
