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
--          MGET reads every state before any write; or none, see ARGV[3]
-- ARGV[1]  now in ms, or '' for the Redis clock (read once)
-- ARGV[2]  s, the arguments per check
-- ARGV[3]  k: 0 when the keys are KEYS; else the k keys follow, undeclared:
--          a Redis Cluster node's keys of several slots (a script's
--          declared keys must share one; the allow-cross-slot-keys flag lets
--          it reach undeclared ones the node serves). Each is read alone,
--          and a key the node does not serve (a slot moved or migrating)
--          fails its check alone with PTNOTHERE, unrun: the client sends it
--          again on its own, where MOVED or ASK can answer it.
-- then s arguments per check: cost, L, P[, B][, max_wait]; or s = 0 and
--          one set of them that every check shares (the usual case: one
--          policy, cost 1), so Redis reads them once. max_wait (a
--          reservation's, 0: none) is there only when some check of the
--          batch may wait: MW, the count of a check's arguments, tells the
--          wrapped check where it is (cmake/embed_lua.cmake)
-- Returns per check what its flat script returns alone, or an error.
local call = redis.call
local floor, ceil = math.floor, math.ceil
local NOW = tonumber(ARGV[1])
if NOW == nil then
  local t = call('TIME')
  NOW = t[1] * 1000 + floor(t[2] / 1000)
end
local s, k = ARGV[2] + 0, ARGV[3] + 0
local base = 3 + k -- the arguments of check i start after X[base + (i - 1) * s]
local MW = s
if s == 0 then
  MW = #ARGV - base
end
-- Every argument, as a number (X[j] is ARGV[j] + 0).
local X = {}
for j = base + 1, #ARGV do
  X[j] = ARGV[j] + 0
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
local keys, v, out = KEYS, nil, {}
if k == 0 then
  v = call('MGET', unpack(KEYS))
else
  keys, v = {}, {}
  for i = 1, k do
    keys[i] = ARGV[3 + i]
    local got = redis.pcall('GET', keys[i])
    if type(got) == 'table' and got.err then
      if string.sub(got.err, 1, 9) ~= 'WRONGTYPE' then
        got.err = 'PTNOTHERE ' .. got.err
      end
      out[i] = got
      got = false
    end
    v[i] = got
  end
end
for i = 1, #keys do
  if not out[i] then
    BAD = false
    local r = one(keys[i], base + (i - 1) * s, v[i]) -- s = 0: every o is base
    if BAD then
      r = {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
    end
    out[i] = r
  end
end
return out
