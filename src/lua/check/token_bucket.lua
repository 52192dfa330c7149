-- check/token_bucket.lua: one token_bucket limit, one check or peek (cost
-- >= 0), as a flat script (see check/gcra.lua for why, and why math.floor
-- is exact here). Computes exactly what token_bucket() in
-- src/core/algorithms.c and algorithms[2] in src/lua/token_bucket.lua do.
--
-- KEYS[1] the bucket key; ARGV: cost, L, P (ms), B, [now] (absent or '':
-- Redis TIME), [max_wait] (ms: a reservation). Returns remaining x 2^32 +
-- reset when allowed (or {remaining, reset} if that does not fit),
-- {remaining, reset, retry} when denied, {remaining, reset, -1 - wait}
-- when allowed after a wait (src/redis/command.c reads it). State: two doubles
-- (struct '<dd'), the units used x P and the time of the last refill (ms).
-- Globals read once: each global is a table lookup on every use.
local floor, ceil = math.floor, math.ceil
local call, key, argv = redis.call, KEYS[1], ARGV
local now = argv[5]
if now and now ~= '' then
  now = now + 0
else
  local t = call('TIME')
  now = t[1] * 1000 + floor(t[2] / 1000)
end
local cost, L, P, B = argv[1] + 0, argv[2] + 0, argv[3] + 0, argv[4] + 0
local used, ts = 0, now
local v = call('GET', key)
if v then
  if #v ~= 16 then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
  used, ts = struct.unpack('<dd', v)
  -- Refill L scaled units per ms (compared first: no overflow); a clock
  -- that went back adds nothing and keeps the stored ts.
  if now > ts then
    if now - ts >= ceil(used / L) then
      used = 0
    else
      used = used - (now - ts) * L
    end
    ts = now
  end
end
-- Tokens x P: below zero when B was lowered under what was used.
local tokens = B * P - used
local paused = ts - now
local want = cost * P
local wait = 0
if cost > 0 and (cost > B or tokens < want) then
  local retry = -1
  if cost <= B then
    retry = paused + ceil((want - tokens) / L)
  end
  -- A reservation: within the wait the caller accepts, the tokens are
  -- taken now (the bucket goes below zero by what the wait refills).
  local mw = argv[6]
  if not mw or retry < 0 or retry > mw + 0 then
    local remaining = floor(tokens / P)
    if remaining < 0 then
      remaining = 0
    end
    return {remaining, paused + ceil(used / L), retry}
  end
  wait = retry
end
if cost > 0 then
  tokens = tokens - want
  used = used + want
end
local reset = paused + ceil(used / L)
if cost > 0 then
  -- The key lives until the bucket is full again.
  call('SET', key, struct.pack('<dd', used, ts), 'PX', reset)
end
local remaining = floor(tokens / P)
if remaining < 0 then -- a peek while B is lowered under what was used
  remaining = 0
end
if wait > 0 then
  -- A reservation: one negative integer, -1 - (wait x 2^32 + reset), when
  -- it fits (nothing is left now: remaining 0), else a table.
  if wait < 2097152 and reset < 4294967296 then
    return -1 - (wait * 4294967296 + reset)
  end
  return {0, reset, -1 - wait}
end
-- Allowed: one integer, remaining x 2^32 + reset, when both fit (nearly
-- always): Redis turns a number into a reply far more cheaply than a table,
-- whose every reply first probes it for special fields. Else a table.
if reset < 4294967296 and remaining < 2097152 then
  return remaining * 4294967296 + reset
end
return {remaining, reset}
