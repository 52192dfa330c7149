-- check/fixed_window.lua: one fixed_window limit, one check or peek (cost
-- >= 0), as a flat script (see check/gcra.lua for why, and why math.floor
-- is exact here). Computes exactly what fixed_window() in
-- src/core/algorithms.c and algorithms[1] in src/lua/fixed_window.lua do.
--
-- KEYS[1] the counter key; ARGV: cost, L, P (ms), [now] (absent: Redis
-- TIME). Returns remaining x 2^32 + reset when allowed (or {remaining,
-- reset} if that does not fit), {remaining, reset, retry} when denied
-- (src/redis/command.c reads it). State: two doubles
-- (struct '<dd'), the window number (now / P) and the count.
-- Globals read once: each global is a table lookup on every use.
local floor = math.floor
local call, key, argv = redis.call, KEYS[1], ARGV
local now = argv[4]
if now then
  now = now + 0
else
  local t = call('TIME')
  now = t[1] * 1000 + floor(t[2] / 1000)
end
local cost, L, P = argv[1] + 0, argv[2] + 0, argv[3] + 0
local w = floor(now / P)
local count = 0
local v = call('GET', key)
if v then
  if #v ~= 16 then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
  local a, b = struct.unpack('<dd', v)
  -- A stored window ahead of now (a clock that went back) stays current.
  if a > w then
    w = a
  end
  if a == w then
    count = b
  end
end
local window_end = (w + 1) * P - now
local reset = 0
if count > 0 then
  reset = window_end
end
-- A peek is always allowed, even over a limit lowered below the count.
if cost > 0 and cost > L - count then
  local retry = window_end
  if cost > L then
    retry = -1
  end
  if count > L then
    return {0, reset, retry}
  end
  return {L - count, reset, retry}
end
if cost > 0 then
  count = count + cost
  reset = window_end
  call('SET', key, struct.pack('<dd', w, count), 'PX', window_end)
end
local remaining = L - count
if remaining < 0 then -- a peek over a limit lowered below the count
  remaining = 0
end
-- Allowed: one integer, remaining x 2^32 + reset, when both fit (nearly
-- always): Redis turns a number into a reply far more cheaply than a table,
-- whose every reply first probes it for special fields. Else a table.
if reset < 4294967296 and remaining < 2097152 then
  return remaining * 4294967296 + reset
end
return {remaining, reset}
