-- policy.lua: the entry point. One call decides every limit of a policy for
-- one key, all-or-nothing: state is written only if every limit allows.
--
-- KEYS[i]  the state key of limit i (all share one hash tag: one slot)
-- ARGV[1]  now in ms, or '' to read the Redis clock (one clock for the fleet)
-- ARGV[2]  cost (0 = peek: nothing is written; -n = refund n units in every
--          limit), or a lease operation (see concurrency.lua)
-- ARGV[3 + 4(i-1) ..]  algorithm code, L, P (ms), B of limit i
-- Returns 5 integers per limit: allowed (1/0), limit, remaining, reset_ms,
-- retry_after_ms. Aggregation into one decision happens in the client.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost = tonumber(ARGV[2])
if cost == nil then
  return lease_command(KEYS[1], now, ARGV)
end

local function limit_at(i)
  local at = 3 + (i - 1) * 4
  local alg = algorithms[tonumber(ARGV[at])]
  local l = { L = tonumber(ARGV[at + 1]), P = tonumber(ARGV[at + 2]), B = tonumber(ARGV[at + 3]) }
  return alg, l
end

local function push(out, e)
  local n = #out
  out[n + 1] = e.allowed and 1 or 0
  out[n + 2] = e.limit
  out[n + 3] = e.remaining
  out[n + 4] = e.reset
  out[n + 5] = e.retry
end

for i = 1, #KEYS do
  if limit_at(i) == nil then
    return redis.error_reply('porteiro: unknown algorithm ' .. tostring(ARGV[3 + (i - 1) * 4]))
  end
end

-- A refund gives units back in every limit, then reports each as it stands.
if cost < 0 then
  local out = {}
  for i = 1, #KEYS do
    local alg, l = limit_at(i)
    local st = alg.load(KEYS[i])
    local r = alg.refund(l, st, now, -cost)
    if r.write then
      alg.store(KEYS[i], r)
      st = r.next
    end
    push(out, alg.eval(l, st, now, 0))
  end
  return out
end

local evals, all = {}, true
for i = 1, #KEYS do
  local alg, l = limit_at(i)
  local st = alg.load(KEYS[i])
  local e = alg.eval(l, st, now, cost)
  evals[i] = { alg = alg, l = l, st = st, e = e }
  all = all and e.allowed
end

local out = {}
for i = 1, #KEYS do
  local v = evals[i]
  local e = v.e
  if all then
    if e.write then
      v.alg.store(KEYS[i], e)
    end
  elseif e.allowed and cost > 0 then
    -- Denied elsewhere: this limit consumed nothing, report it as it stands.
    e = v.alg.eval(v.l, v.st, now, 0)
  end
  push(out, e)
end
return out
