-- sliding_window.lua: the previous window weighted by the part of it still
-- inside the sliding period, plus the current one, compared exactly in
-- integers (estimate x P). Mirrors sliding_window() in src/core/algorithms.c.
local function sliding_fit(prev, room, P)
  if room < 0 then
    return P
  end
  if prev == 0 then
    return 0
  end
  return math.max(0, P - floor_div(room * P, prev))
end

-- The window judged at now, ms elapsed in it, the shift to it and its two
-- counts. A stored window ahead of now (a clock that went back) is judged
-- from its start, shift ms later. Mirrors pt_sliding_window_view().
local function window_view(P, a, b, c, now)
  local w = floor_div(now, P)
  local shift = 0
  if a ~= nil and a > w then
    shift = a * P - now
    w = a
  end
  local cur, prev = 0, 0
  if a == w then
    cur, prev = b, c
  elseif a == w - 1 then
    prev = b
  end
  return w, now + shift - w * P, shift, cur, prev
end

algorithms[4] = {
  load = load_state,
  store = store3,
  eval = function(L, P, B, now, cost, key, a, b, c, mw)
    local w, el, shift, cur, prev = window_view(P, a, b, c, now)
    -- ms until the check fits (-1: never): at the judged moment, later in
    -- that window, or in the next one (later), where the current count
    -- becomes the previous one.
    local wait, later = -1, false
    if cost <= L then
      if prev * (P - el) + (cur + cost) * P <= L * P then
        wait = shift
      else
        local at = sliding_fit(prev, L - cur - cost, P)
        if at < P then
          wait = shift + at - el
        else
          wait, later = shift + P - el + sliding_fit(cur, L - cost, P), true
        end
      end
    end
    local allowed = cost == 0 or (wait >= 0 and wait <= mw)
    if allowed and cost > 0 then
      if later then
        shift, el, w, prev, cur = shift + P - el, 0, w + 1, cur, 0
      end
      cur = cur + cost
    end
    local reset = 0
    if cur > 0 then
      reset = 2 * P - el
    elseif prev > 0 then
      reset = P - el
    end
    if reset > 0 then
      reset = reset + shift
    end
    local remaining = math.max(0, floor_div(L * P - prev * (P - el) - cur * P, P))
    if not allowed then
      return false, L, remaining, reset, wait
    end
    --@part eval_peek
    return true, L, remaining, reset, wait, reset, w, cur, prev
  end,
  -- The current window's count first, then the previous one's.
  refund = function(L, P, B, now, amount, key, a, b, c)
    local w, el, shift, cur, prev = window_view(P, a, b, c, now)
    if cur == 0 and prev == 0 then
      return nil
    end
    local from_cur = math.min(amount, cur)
    cur = cur - from_cur
    prev = math.max(0, prev - (amount - from_cur))
    local ttl = 0
    if cur > 0 then
      ttl = shift + 2 * P - el
    elseif prev > 0 then
      ttl = shift + P - el
    end
    return ttl, w, cur, prev
  end,
}
