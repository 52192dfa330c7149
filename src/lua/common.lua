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
-- (their meaning per algorithm is in src/algorithms.h).
local function load_hash(key)
  local v = redis.call('HMGET', key, 'a', 'b', 'c')
  local a = tonumber(v[1])
  if a == nil then
    return nil
  end
  return { a = a, b = tonumber(v[2]) or 0, c = tonumber(v[3]) or 0 }
end

local function store_hash(key, e)
  redis.call('HSET', key, 'a', e.next.a, 'b', e.next.b, 'c', e.next.c)
  redis.call('PEXPIRE', key, e.ttl)
end

-- algorithms[code] = { load = fn(key), eval = fn(l, st, now, cost), store = fn(key, e) }
-- with the codes of porteiro_algorithm in include/porteiro.h.
local algorithms = {}
