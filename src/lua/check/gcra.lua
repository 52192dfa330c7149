-- check/gcra.lua: one gcra limit, one check or peek (cost >= 0), as a flat
-- script: no function, no table but the reply, so that Redis runs little
-- more than TIME, GET and SET ... PX. Computes exactly what gcra() in
-- src/core/algorithms.c and algorithms[3] in src/lua/gcra.lua compute
-- (tests/test_twins.c and the scenario table hold all three together).
--
-- KEYS[1] the TAT key; ARGV: now ('' = Redis TIME), cost, algorithm code
-- (unused), L, P (ms), B. Returns allowed, B, remaining, reset, retry.
-- State: "a:b:c", the TAT as whole ms a plus b ticks of 1/c ms (c = L).
--
-- math.floor(x / y) is exact here without the correction floor_div makes:
-- every x and y is an integer with |x| + y < 2^53 (PORTEIRO_MAX_SCALED), so
-- the rounded quotient can never reach the next integer.
local floor, ceil = math.floor, math.ceil
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = t[1] * 1000 + floor(t[2] / 1000)
end
local cost, L, P, B = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local tau = B * P
-- rel = TAT - now in ticks (0: a TAT in the past), within a bound; beyond:
-- whole ms of a TAT further ahead (a clock that went back).
local rel, beyond = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  if a == nil then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
  -- Ticks of another L (the limit was changed): the TAT rounds up to its
  -- next whole ms. Both are canonical decimals, so text compares.
  if c ~= ARGV[4] then
    if b ~= '0' then
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
if cost > 0 and (cost > B or nxt > tau) then
  local retry = -1
  if cost <= B then
    retry = beyond + ceil((nxt - tau) / L)
  end
  return {0, B, math.max(0, floor((tau - rel) / P)), beyond + ceil(rel / L), retry}
end
if cost > 0 then
  -- Allowed: beyond is 0 (a TAT beyond the bound leaves no room).
  rel = nxt
  local whole = floor(rel / L)
  redis.call('SET', KEYS[1], string.format('%d:%d:%d', now + whole, rel - whole * L, L), 'PX',
             ceil(rel / L))
end
return {1, B, math.max(0, floor((tau - rel) / P)), beyond + ceil(rel / L), 0}
