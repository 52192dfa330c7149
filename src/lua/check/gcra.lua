-- check/gcra.lua: one gcra limit, one check or peek (cost >= 0), as a flat
-- script: no function, no table but the reply, so that Redis runs little
-- more than TIME, GET and SET ... PX. Computes exactly what gcra() in
-- src/core/algorithms.c and algorithms[3] in src/lua/gcra.lua compute
-- (tests/test_twins.c and the scenario table hold all three together).
--
-- KEYS[1] the TAT key; ARGV: cost, L, P (ms), B, [now] (absent or '': Redis
-- TIME), [max_wait] (ms: a reservation). Returns remaining x 2^32 + reset
-- when allowed (or {remaining, reset} if that does not fit), {remaining,
-- reset, retry} when denied, {remaining, reset, -1 - wait} when allowed
-- after a wait (src/redis/command.c reads it). State: three doubles
-- (struct '<ddd', exact below 2^53), the TAT as whole ms plus ticks of 1/L
-- ms, and that L. Binary, not text: struct packs and unpacks in a third of
-- the time string.format and string.match take, which is most of what a
-- script costs beyond its Redis commands.
--
-- math.floor(x / y) is exact here without the correction floor_div makes:
-- every x and y is an integer with |x| + y < 2^53 (PORTEIRO_MAX_SCALED), so
-- the rounded quotient can never reach the next integer.
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
local tau = B * P
-- rel = TAT - now in ticks (0: a TAT in the past), within a bound; beyond:
-- whole ms of a TAT further ahead (a clock that went back).
local rel, beyond = 0, 0
local v = call('GET', key)
if v then
  if #v ~= 24 then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
  local a, b, c = struct.unpack('<ddd', v)
  -- Ticks of another L (the limit was changed): the TAT rounds up to its
  -- next whole ms.
  if c ~= L then
    if b > 0 then
      a = a + 1
    end
    b = 0
  end
  local ahead = a - now
  if ahead >= 0 then
    local bound = ceil(tau / L) + 1
    if ahead > bound then
      beyond = ahead - bound
      ahead = bound
    end
    rel = ahead * L + b
  end
end
local nxt = rel + cost * P
local wait = 0
if cost > 0 and (cost > B or nxt > tau) then
  local retry = -1
  if cost <= B then
    retry = beyond + ceil((nxt - tau) / L)
  end
  -- A reservation: within the wait the caller accepts, the units are
  -- taken now (the TAT moves on) and it proceeds after retry ms.
  local mw = argv[6]
  if not mw or retry < 0 or retry > mw + 0 then
    local remaining = floor((tau - rel) / P)
    if remaining < 0 then
      remaining = 0
    end
    return {remaining, beyond + ceil(rel / L), retry}
  end
  wait = retry
end
-- beyond is 0 when a unit is taken without a wait (a TAT beyond the bound
-- leaves no room), and the key lives for exactly the reset.
if cost > 0 then
  rel = nxt
end
-- reset = beyond + ceil(rel / L), from the same division as the new TAT.
local whole = floor(rel / L)
local frac = rel - whole * L
local reset = beyond + whole
if frac > 0 then
  reset = reset + 1
end
if cost > 0 then
  call('SET', key, struct.pack('<ddd', now + beyond + whole, frac, L), 'PX', reset)
end
local remaining = floor((tau - rel) / P)
if remaining < 0 then -- a peek while the TAT is beyond tau, or a reservation
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
