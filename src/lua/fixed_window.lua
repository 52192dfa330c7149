-- fixed_window.lua: one counter per window; windows are multiples of P since
-- the Unix epoch. Mirrors fixed_window() in src/core/algorithms.c.
algorithms[1] = {
  load = load_state,
  store = store2,
  eval = function(L, P, B, now, cost, key, a, b, c, mw)
    local w = floor_div(now, P)
    -- A stored window ahead of now (a reservation reached into it, or the
    -- clock went back) is judged: nothing passes before it begins.
    if a ~= nil and a > w then
      w = a
    end
    local count = 0
    if a == w then
      count = b
    end
    -- ms until the check fits (-1: never): in the judged window once it
    -- begins, or in the next one (later).
    local wait, later = -1, false
    if cost <= L - count then
      wait = math.max(0, w * P - now)
    elseif cost <= L then
      wait, later = (w + 1) * P - now, true
    end
    local allowed = cost == 0 or (wait >= 0 and wait <= mw)
    if allowed and cost > 0 then
      if later then
        w, count = w + 1, 0
      end
      count = count + cost
    end
    local window_end = (w + 1) * P - now
    local remaining, reset = math.max(0, L - count), (count > 0) and window_end or 0
    if not allowed then
      return false, L, remaining, reset, wait
    end
    --@part eval_peek
    return true, L, remaining, reset, wait, window_end, w, count
  end,
  -- Gives back units counted in the current window; nothing once it is over.
  refund = function(L, P, B, now, amount, key, a, b)
    local w = floor_div(now, P)
    if a ~= nil and a > w then
      w = a
    end
    if a ~= w or b <= 0 then -- no state, or an older window
      return nil
    end
    local count = math.max(0, b - amount)
    local ttl = 0
    if count > 0 then
      ttl = (w + 1) * P - now
    end
    return ttl, w, count
  end,
}
