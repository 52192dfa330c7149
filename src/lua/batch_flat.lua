-- batch_flat.lua: many checks of one limit of one algorithm in one call,
-- each decided by that algorithm's flat script (src/lua/check/), which the
-- build wraps as a function one(key, o, v0) and puts where %%ONE%% stands
-- (cmake/embed_lua.cmake): the same code runs alone and in batches, with
-- its key, its arguments after X[o] and its state v0 as parameters. What
-- a check script does once per call (locals of redis.call and math, the
-- clock, the text-to-number conversion of its arguments) is done here once
-- per batch: the function keeps only the arithmetic and its SET.
--
-- KEYS     one key per check, all distinct (the client sees to it), so one
--          MGET reads every state before any write
-- ARGV[1]  now in ms, or '' for the Redis clock (read once)
-- ARGV[2]  s, the arguments per check; then s per check: cost, L, P[, B];
--          or 0, then one set of them that every check shares (the usual
--          case: one policy, cost 1), so Redis reads them once
-- Returns per check what its flat script returns alone, or an error.
local call = redis.call
local floor, ceil = math.floor, math.ceil
local NOW = tonumber(ARGV[1])
if NOW == nil then
  local t = call('TIME')
  NOW = t[1] * 1000 + floor(t[2] / 1000)
end
-- Every argument after ARGV[2], as a number (X[k] is ARGV[k] + 0).
local X = {}
for k = 3, #ARGV do
  X[k] = ARGV[k] + 0
end
-- MGET reads a key of another type as absent; a plain SET would then
-- replace it. So a state written where MGET saw none is written with NX:
-- if that fails, the key holds something else and the check fails alone.
local BAD = false
local function SETV(v0, key, value, px, ttl)
  if v0 then
    call('SET', key, value, px, ttl)
  elseif not call('SET', key, value, px, ttl, 'NX') then
    BAD = true
  end
end
%%ONE%%
local s = ARGV[2] + 0
local v = call('MGET', unpack(KEYS))
local out = {}
for i = 1, #KEYS do
  BAD = false
  local r = one(KEYS[i], 2 + (i - 1) * s, v[i]) -- s = 0: every o is 2
  if BAD then
    r = {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
  end
  out[i] = r
end
return out
