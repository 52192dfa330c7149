-- check/gcra.lua: one gcra limit, one check or peek (cost >= 0), as a flat
-- script: no function, no table but the reply, so that Redis runs little
-- more than TIME, GET and SET ... PX. Computes exactly what gcra() in
-- src/core/algorithms.c and algorithms[3] in src/lua/gcra.lua compute
-- (tests/core/test_twins.c and the scenario table hold all three together).
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
--@part flat_args_lpb
local tau = B * P
-- rel = TAT - now in ticks (0: a TAT in the past), within a bound; beyond:
-- whole ms of a TAT further ahead (a clock that went back).
local rel, beyond = 0, 0
-- v, the state at key, read and seen (flat_get24 opens "if v then").
--@part flat_get24
  --@part gcra_view
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
  --@part flat_reply_wait
end
--@part flat_reply
