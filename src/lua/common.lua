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

-- State of the counter algorithms: two or three doubles packed in one
-- string (struct '<dd' or '<ddd'; integers below 2^53 are exact), whose
-- meaning per algorithm is in src/core/algorithms.h; returned as values, a
-- is nil when the key holds no state. One string, not a hash: GET and one
-- SET ... PX that carries the TTL are the cheapest read and write Redis
-- has, and struct is three times cheaper than text formatting and parsing.
-- Anything else at the key is an error, not a fresh start.
local function load_state(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  if #v == 16 then
    local a, b = struct.unpack('<dd', v)
    return a, b, 0
  end
  if #v ~= 24 then
    return error({err = 'WRONGTYPE porteiro: the limiter key holds no limiter state'})
  end
  local a, b, c = struct.unpack('<ddd', v)
  return a, b, c
end

-- A TTL of 0 means the state is "no state" already: nothing to keep.
local function store2(key, now, ttl, a, b)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, struct.pack('<dd', a, b), 'PX', ttl)
  end
end

local function store3(key, now, ttl, a, b, c)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, struct.pack('<ddd', a, b, c), 'PX', ttl)
  end
end

-- algorithms[code] = { load, eval, refund, store } with the codes of
-- porteiro_algorithm in include/porteiro.h. Everything passes as values:
--   load(key) -> a, b, c (the stored state; a == nil: none)
--   eval(L, P, B, now, cost, key, a, b, c, mw) -> allowed, limit,
--     remaining, reset, retry [, ttl, na, nb, nc: the state to write if the
--     policy allows; present only for an allowed cost > 0]. mw: the wait a
--     reservation accepts (0: none); allowed after a wait, retry is that
--     wait (docs/algorithms.md, "Reservations")
--   refund(L, P, B, now, amount, key, a, b, c) -> ttl, na, nb, nc
--     (nothing: there is nothing to write)
--   store(key, now, ttl, na, nb, nc)
local algorithms = {}
