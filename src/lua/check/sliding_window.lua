-- check/sliding_window.lua: one sliding_window limit, one check or peek
-- (cost >= 0), as a flat script (see check/gcra.lua for why, and why
-- math.floor is exact here). Computes exactly what sliding_window() in
-- src/core/algorithms.c and algorithms[4] in src/lua/sliding_window.lua do.
--
-- KEYS[1] the counters' key; ARGV: cost, L, P (ms), [now] (absent or '':
-- Redis TIME), [max_wait] (ms: a reservation). Returns remaining x 2^32 +
-- reset when allowed (or {remaining, reset} if that does not fit),
-- {remaining, reset, retry} when denied, {0, reset, -1 - wait} when
-- allowed after a wait (src/redis/command.c reads it). State: three doubles
-- (struct '<ddd'): the window number, its count, the previous one's.
--@part flat_args_lp
local w = floor(now / P)
local shift, cur, prev = 0, 0, 0
-- v, the state at key, read and seen (flat_get24 opens "if v then").
--@part flat_get24
  --@part sliding_window_view
end
local el = now + shift - w * P
-- estimate x P = prev x (P - el) + cur x P, compared exactly.
local fits = cost <= L and prev * (P - el) + (cur + cost) * P <= L * P
local allowed = cost == 0 or (fits and shift == 0)
if allowed and cost > 0 then
  cur = cur + cost
end
local reset = 0
if cur > 0 then
  reset = 2 * P - el + shift
elseif prev > 0 then
  reset = P - el + shift
end
local remaining = floor((L * P - prev * (P - el) - cur * P) / P)
if remaining < 0 then
  remaining = 0
end
if allowed then
  if cost > 0 then
    call('SET', key, struct.pack('<ddd', w, cur, prev), 'PX', reset)
  end
  --@part flat_reply
end
-- wait: ms until the check fits (-1: never).
local wait, later = -1, false
if fits then
  wait = shift
elseif cost <= L then
  --@part sliding_window_fit
end
local mw = argv[5]
if not mw or wait < 0 or wait > mw + 0 then
  return {remaining, reset, wait}
end
-- A reservation: counted now in the window it passes in.
if later then
  shift, el, w, prev, cur = shift + P - el, 0, w + 1, cur, 0
end
reset = 2 * P - el + shift
call('SET', key, struct.pack('<ddd', w, cur + cost, prev), 'PX', reset)
--@part flat_reply_wait
