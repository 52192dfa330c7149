-- common.lua: helpers shared by every algorithm (the scripts are concatenated
-- at build time into one script, entry point policy.lua).
--
-- Lua numbers are doubles: every value here is an integer below 2^53 (the
-- library refuses limits whose scaled values could reach 2^50), and every
-- division goes through floor_div so a rounded quotient is corrected.

local function floor_div(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceil_div(a, b)
  return -floor_div(-a, b)
end

-- Integers as exact decimal text, for string concatenation: tostring()
-- would write 1e+15. Numbers passed to redis.call need no conversion: Redis
-- writes an integral double below 2^53 as its exact digits, and the
-- formatting costs about a microsecond per call.
local function int_text(x)
  return string.format('%.0f', x)
end

-- State of the counter algorithms: a hash with integer fields a, b, c
-- (their meaning per algorithm is in src/algorithms.h), as three values; a
-- is nil when the key holds no state. Values, not a table: a table costs an
-- allocation on every call of the script.
local function load_hash(key)
  local v = redis.call('HMGET', key, 'a', 'b', 'c')
  local a = tonumber(v[1])
  if a == nil then
    return nil
  end
  return a, tonumber(v[2]) or 0, tonumber(v[3]) or 0
end

local function store_hash(key, now, ttl, a, b, c)
  redis.call('HSET', key, 'a', a, 'b', b, 'c', c)
  redis.call('PEXPIRE', key, ttl)
end

-- algorithms[code] = { load, eval, refund, store } with the codes of
-- porteiro_algorithm in include/porteiro.h. Everything passes as values:
--   load(key) -> a, b, c (the stored state; a == nil: none)
--   eval(L, P, B, now, cost, key, a, b, c) -> allowed, limit, remaining,
--     reset, retry [, ttl, na, nb, nc: the state to write if the policy
--     allows; present only for an allowed cost > 0]
--   refund(L, P, B, now, amount, key, a, b, c) -> ttl, na, nb, nc
--     (nothing: there is nothing to write)
--   store(key, now, ttl, na, nb, nc)
local algorithms = {}
