-- sliding_window.lua: the previous window weighted by the part of it still
-- inside the sliding period, plus the current one, compared exactly in
-- integers (estimate x P). Mirrors sliding_window() in src/algorithms.c.
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
local function window_view(P, st, now)
  local w = floor_div(now, P)
  local shift = 0
  if st ~= nil and st.a > w then
    shift = st.a * P - now
    w = st.a
  end
  local cur, prev = 0, 0
  if st ~= nil and st.a == w then
    cur, prev = st.b, st.c
  elseif st ~= nil and st.a == w - 1 then
    prev = st.b
  end
  return w, now + shift - w * P, shift, cur, prev
end

algorithms[4] = {
  load = load_hash,
  store = store_hash,
  eval = function(l, st, now, cost)
    local P, L = l.P, l.L
    local w, el, shift, cur, prev = window_view(P, st, now)
    local e = { allowed = cost == 0 or (cost <= L and prev * (P - el) + (cur + cost) * P <= L * P),
                limit = L, retry = 0 }
    if e.allowed and cost > 0 then
      cur = cur + cost
      e.write = true
      e.next = { a = w, b = cur, c = prev }
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
    e.ttl = reset
    e.remaining = math.max(0, floor_div(L * P - prev * (P - el) - cur * P, P))
    e.reset = reset
    if not e.allowed then
      if cost > L then
        e.retry = -1
      else
        local at = sliding_fit(prev, L - cur - cost, P)
        if at < P then
          e.retry = shift + at - el
        else
          e.retry = shift + P - el + sliding_fit(cur, L - cost, P)
        end
      end
    end
    return e
  end,
  -- The current window's count first, then the previous one's.
  refund = function(l, st, now, amount)
    local P = l.P
    local w, el, shift, cur, prev = window_view(P, st, now)
    if cur == 0 and prev == 0 then
      return { write = false }
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
    return { write = true, next = { a = w, b = cur, c = prev }, ttl = ttl }
  end,
}
