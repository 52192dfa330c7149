-- gcra.lua: the generic cell rate algorithm in ticks of 1/L ms (T = P ticks,
-- tau = B*P ticks); the TAT is stored as whole ms (a) plus ticks (b) of the
-- L they count in (c). Mirrors gcra() in src/core/algorithms.c.
-- TAT - now in ticks within a bound, and whole ms beyond it (a TAT far
-- ahead: a clock that went back); a TAT in the past means now. Mirrors
-- pt_gcra_view().
local function tat_view(L, P, B, a, b, c, now)
  if a == nil then
    return 0, 0
  end
  --@part gcra_relimit
  local ahead, bound = a - now, ceil_div(B * P, L) + 1
  local beyond = 0
  if ahead > bound then
    beyond = ahead - bound
    ahead = bound
  end
  if ahead < 0 then
    return 0, 0
  end
  return ahead * L + b, beyond
end

algorithms[3] = {
  load = load_state,
  store = store3,
  eval = function(L, P, B, now, cost, key, a, b, c, mw)
    local T, tau = P, B * P
    local rel, beyond = tat_view(L, P, B, a, b, c, now)
    local nxt = rel + cost * T
    -- ms until the units conform (-1: never): within mw, a reservation.
    local wait = -1
    if cost <= B then
      wait = 0
      if nxt > tau then
        wait = beyond + ceil_div(nxt - tau, L)
      end
    end
    local allowed = cost == 0 or (wait >= 0 and wait <= mw)
    if allowed and cost > 0 then
      rel = nxt
    end
    local remaining = math.max(0, floor_div(tau - rel, T))
    local reset = beyond + ceil_div(rel, L)
    --@part eval_denied_b
    -- The new TAT, as whole ms and ticks (beyond is 0 unless it waits).
    local whole = floor_div(rel, L)
    return true, B, remaining, reset, wait, reset, now + beyond + whole, rel - whole * L, L
  end,
  -- Moves the TAT back by amount x T, not before now.
  refund = function(L, P, B, now, amount, key, a, b, c)
    local T = P
    local rel, beyond = tat_view(L, P, B, a, b, c, now)
    if rel <= 0 then -- no state, or a TAT in the past
      return nil
    end
    if amount < ceil_div(rel, T) then
      rel = rel - amount * T
    elseif amount > floor_div(9007199254740992 - rel, T) then
      rel, beyond = 0, 0 -- more than anything ahead: back to now
    else
      -- The rest comes off the whole ms beyond the bound (a reservation's
      -- far TAT, or a clock that went back), not before now.
      local x = amount * T - rel
      local k = ceil_div(x, L)
      if k >= beyond then
        rel, beyond = 0, 0
      else
        beyond, rel = beyond - k, k * L - x
      end
    end
    local whole = floor_div(rel, L)
    return beyond + ceil_div(rel, L), now + beyond + whole, rel - whole * L, L
  end,
}
