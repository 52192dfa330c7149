-- check/fixed_window.lua: one fixed_window limit, one check or peek (cost
-- >= 0), as a flat script (see check/gcra.lua for why, and why math.floor
-- is exact here). Computes exactly what fixed_window() in
-- src/core/algorithms.c and algorithms[1] in src/lua/fixed_window.lua do.
--
-- KEYS[1] the counter key; ARGV: cost, L, P (ms), [now] (absent or '':
-- Redis TIME), [max_wait] (ms: a reservation). Returns remaining x 2^32 +
-- reset when allowed (or {remaining, reset} if that does not fit),
-- {remaining, reset, retry} when denied, {0, reset, -1 - wait} when
-- allowed after a wait (src/redis/command.c reads it). State: two doubles
-- (struct '<dd'), the window number (now / P) and the count.
--@part flat_args_lp
local w = floor(now / P)
local count = 0
-- v, the state at key, read and seen (flat_get16 opens "if v then").
--@part flat_get16
  --@part fixed_window_view
end
local window_end = (w + 1) * P - now
local reset = 0
if count > 0 then
  reset = window_end
end
-- > 0: the window judged has not begun.
local start = w * P - now
-- A peek is always allowed, even over a limit lowered below the count.
if cost > 0 and (cost > L - count or start > 0) then
  -- Not now: once the judged window begins, or in the next one.
  local wait, later = start, cost > L - count
  --@part fixed_window_wait
  local mw = argv[5]
  if not mw or wait < 0 or wait > mw + 0 then
    if count > L then
      return {0, reset, wait}
    end
    return {L - count, reset, wait}
  end
  -- A reservation: counted now in the window it passes in.
  if later then
    w, count, window_end = w + 1, 0, window_end + P
  end
  call('SET', key, struct.pack('<dd', w, count + cost), 'PX', window_end)
  -- A reservation: one negative integer, -1 - (wait x 2^32 + reset), when
  -- it fits (nothing is left now: remaining 0), else a table.
  if wait < 2097152 and window_end < 4294967296 then
    return -1 - (wait * 4294967296 + window_end)
  end
  return {0, window_end, -1 - wait}
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
--@part flat_reply
