-- fixed_window.lua: one counter per window; windows are multiples of P since
-- the Unix epoch. Mirrors fixed_window() in src/core/algorithms.c.
algorithms[1] = {
  load = load_state,
  store = store2,
  eval = function(L, P, B, now, cost, key, a, b)
    local w = floor_div(now, P)
    -- A stored window ahead of now (a clock that went back) stays current.
    if a ~= nil and a > w then
      w = a
    end
    local count = 0
    if a == w then
      count = b
    end
    local window_end = (w + 1) * P - now
    local allowed = cost == 0 or cost <= L - count
    if allowed and cost > 0 then
      count = count + cost
    end
    local remaining, reset = math.max(0, L - count), (count > 0) and window_end or 0
    if not allowed then
      return false, L, remaining, reset, (cost > L) and -1 or window_end
    end
    if cost == 0 then
      return true, L, remaining, reset, 0
    end
    return true, L, remaining, reset, 0, window_end, w, count
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
