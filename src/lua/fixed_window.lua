-- fixed_window.lua: one counter per window; windows are multiples of P since
-- the Unix epoch. Mirrors fixed_window() in src/algorithms.c.
algorithms[1] = {
  load = load_hash,
  store = store_hash,
  eval = function(l, st, now, cost)
    local w = floor_div(now, l.P)
    -- A stored window ahead of now (a clock that went back) stays current.
    if st ~= nil and st.a > w then
      w = st.a
    end
    local count = 0
    if st ~= nil and st.a == w then
      count = st.b
    end
    local window_end = (w + 1) * l.P - now
    local e = { allowed = cost <= l.L - count, limit = l.L, retry = 0 }
    if e.allowed and cost > 0 then
      count = count + cost
      e.write = true
      e.next = { a = w, b = count, c = 0 }
      e.ttl = window_end
    end
    e.remaining = math.max(0, l.L - count)
    e.reset = (count > 0) and window_end or 0
    if not e.allowed then
      e.retry = (cost > l.L) and -1 or window_end
    end
    return e
  end,
  -- Gives back units counted in the current window; nothing once it is over.
  refund = function(l, st, now, amount)
    local w = floor_div(now, l.P)
    if st ~= nil and st.a > w then
      w = st.a
    end
    if st == nil or st.a ~= w or st.b <= 0 then
      return { write = false }
    end
    local count = math.max(0, st.b - amount)
    local ttl = 0
    if count > 0 then
      ttl = (w + 1) * l.P - now
    end
    return { write = true, next = { a = w, b = count, c = 0 }, ttl = ttl }
  end,
}
