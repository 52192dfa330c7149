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
--@part flat_args_lpb
local used, ts = 0, now
-- v, the state at key, read and seen (flat_get16 opens "if v then").
--@part flat_get16
  --@part token_bucket_view
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
  --@part flat_reply_wait
end
--@part flat_reply
