-- policy.lua: the entry point. One call decides every limit of a policy for
-- one key, all-or-nothing: state is written only if every limit allows.
--
-- KEYS[i]  the state key of limit i (all share one hash tag: one slot)
-- ARGV[1]  now in ms, or '' to read the Redis clock (one clock for the fleet)
-- ARGV[2]  cost (0 = peek: nothing is written; -n = refund n units in every
--          limit), a lease operation (see concurrency.lua), or a quota
--          lease 'q...' (see quota.lua)
-- ARGV[3 + 4(i-1) ..]  algorithm code, L, P (ms), B of limit i
-- ARGV[3 + 4n]  the wait a reservation accepts, ms (absent: none)
-- Returns 5 integers per limit: allowed (1/0), limit, remaining, reset_ms,
-- retry_after_ms (allowed: the wait of a reservation, 0 if none).
-- Aggregation into one decision happens in the client.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost = tonumber(ARGV[2])
if cost == nil then
  if string.byte(ARGV[2], 1) == 113 then -- 'q': a quota lease, quota.lua
    return quota_grant(now)
  end
  return lease_command(KEYS[1], now, ARGV)
end

-- Everything passes as values: a table or closure made here is allocated
-- on every call, and a table grown one field at a time is reallocated as it
-- grows (1, 2, 4, 8 fields), which costs more than the rest of the Lua.
local n = #KEYS
local mw = tonumber(ARGV[3 + 4 * n]) or 0
local function limit_at(i)
  local at = 3 + (i - 1) * 4
  return algorithms[tonumber(ARGV[at])], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
         tonumber(ARGV[at + 3])
end

for i = 1, n do
  local at = 3 + (i - 1) * 4
  if algorithms[tonumber(ARGV[at])] == nil then
    return redis.error_reply('porteiro: unknown algorithm ' .. tostring(ARGV[at]))
  end
end

-- One limit, a check or a peek (the common case): its decision is the
-- policy's, so it is written at once and the reply built in one go.
if n == 1 and cost >= 0 then
  local alg, L, P, B = limit_at(1)
  local a, b, c = alg.load(KEYS[1])
  local allowed, limit, remaining, reset, retry, ttl, na, nb, nc =
    alg.eval(L, P, B, now, cost, KEYS[1], a, b, c, mw)
  if na ~= nil then
    alg.store(KEYS[1], now, ttl, na, nb, nc)
  end
  return { allowed and 1 or 0, limit, remaining, reset, retry }
end

-- Several limits, or a refund: 5 values per limit in out.
local out = {}
local function report(i, allowed, limit, remaining, reset, retry)
  local o = (i - 1) * 5
  out[o + 1] = allowed and 1 or 0
  out[o + 2] = limit
  out[o + 3] = remaining
  out[o + 4] = reset
  out[o + 5] = retry
end

-- A refund gives units back in every limit, then reports each as it stands.
if cost < 0 then
  for i = 1, n do
    local alg, L, P, B = limit_at(i)
    local key = KEYS[i]
    local a, b, c = alg.load(key)
    local ttl, na, nb, nc = alg.refund(L, P, B, now, -cost, key, a, b, c)
    if na ~= nil then
      alg.store(key, now, ttl, na, nb, nc)
      a, b, c = na, nb, nc
    end
    report(i, alg.eval(L, P, B, now, 0, key, a, b, c, 0))
  end
  return out
end

-- Per limit, 7 values: the state read (a, b, c), then what to write (ttl,
-- na, nb, nc; na == nil: nothing).
local held = {}
local all = true
for i = 1, n do
  local alg, L, P, B = limit_at(i)
  local a, b, c = alg.load(KEYS[i])
  local allowed, limit, remaining, reset, retry, ttl, na, nb, nc =
    alg.eval(L, P, B, now, cost, KEYS[i], a, b, c, mw)
  report(i, allowed, limit, remaining, reset, retry)
  all = all and allowed
  local h = (i - 1) * 7
  held[h + 1], held[h + 2], held[h + 3] = a, b, c
  held[h + 4], held[h + 5], held[h + 6], held[h + 7] = ttl, na, nb, nc
end

for i = 1, n do
  local h = (i - 1) * 7
  if held[h + 5] ~= nil then -- allowed, cost > 0
    local alg, L, P, B = limit_at(i)
    if all then
      alg.store(KEYS[i], now, held[h + 4], held[h + 5], held[h + 6], held[h + 7])
    else
      -- Denied elsewhere: this limit consumed nothing, report it as it stands.
      report(i, alg.eval(L, P, B, now, 0, KEYS[i], held[h + 1], held[h + 2], held[h + 3], 0))
    end
  end
end
return out
