-- gcra.lua: the generic cell rate algorithm in ticks of 1/L ms (T = P ticks,
-- tau = B*P ticks); the TAT is stored as whole ms (a) plus ticks (b).
-- Mirrors gcra() in src/algorithms.c.
-- TAT - now in ticks within a bound, and whole ms beyond it (a TAT far
-- ahead: a clock that went back); a TAT in the past means now. Mirrors
-- pt_gcra_view().
local function tat_view(l, st, now)
  if st == nil then
    return 0, 0
  end
  local ahead, bound = st.a - now, ceil_div(l.B * l.P, l.L) + 1
  local beyond = 0
  if ahead > bound then
    beyond = ahead - bound
    ahead = bound
  end
  if ahead < 0 then
    return 0, 0
  end
  return ahead * l.L + st.b, beyond
end

algorithms[3] = {
  load = load_hash,
  store = store_hash,
  eval = function(l, st, now, cost)
    local T, tau = l.P, l.B * l.P
    local rel, beyond = tat_view(l, st, now)
    local nxt = rel + cost * T
    local e = { allowed = cost == 0 or (cost <= l.B and nxt <= tau), limit = l.B, retry = 0 }
    if e.allowed and cost > 0 then
      rel = nxt
      local whole = floor_div(rel, l.L)
      e.write = true
      e.next = { a = now + whole, b = rel - whole * l.L, c = 0 }
      e.ttl = ceil_div(rel, l.L)
    end
    e.remaining = math.max(0, floor_div(tau - rel, T))
    e.reset = beyond + ceil_div(rel, l.L)
    if not e.allowed then
      e.retry = (cost > l.B) and -1 or beyond + ceil_div(nxt - tau, l.L)
    end
    return e
  end,
  -- Moves the TAT back by amount x T, not before now.
  refund = function(l, st, now, amount)
    local T = l.P
    local rel, beyond = tat_view(l, st, now)
    if rel <= 0 then -- no state, or a TAT in the past
      return { write = false }
    end
    if amount >= ceil_div(rel, T) then
      rel = 0
    else
      rel = rel - amount * T
    end
    local whole = floor_div(rel, l.L)
    return { write = true, next = { a = now + beyond + whole, b = rel - whole * l.L, c = 0 },
             ttl = beyond + ceil_div(rel, l.L) }
  end,
}
