-- token_bucket.lua: capacity B, continuous refill of L per P ms. The state
-- is the units used (missing tokens) multiplied by P, so a refill of L per ms
-- loses no fraction and a new B keeps what was used. Mirrors token_bucket()
-- in src/core/algorithms.c.
-- Tokens (x P; below zero after B was lowered) and the refill timestamp at
-- now; a clock that went back adds nothing and keeps the stored timestamp.
-- Mirrors pt_token_bucket_view().
local function bucket_view(L, P, B, a, b, now)
  if a == nil then
    return B * P, now
  end
  local used, ts = a, b
  if now > ts then
    -- Compare before multiplying, as the C code does.
    if now - ts >= ceil_div(used, L) then
      --@part token_bucket_refill
    ts = now
  end
  return B * P - used, ts
end

algorithms[2] = {
  load = load_state,
  store = store2,
  eval = function(L, P, B, now, cost, key, a, b, c, mw)
    local cap = B * P
    local tokens, ts = bucket_view(L, P, B, a, b, now)
    -- ms until the refill resumes: > 0 only when the clock went back.
    local paused = ts - now
    local want = cost * P
    -- ms until the bucket holds cost tokens (-1: never): within mw, a
    -- reservation takes them now, below zero.
    local wait = -1
    if cost <= B then
      wait = 0
      if tokens < want then
        wait = paused + ceil_div(want - tokens, L)
      end
    end
    local allowed = cost == 0 or (wait >= 0 and wait <= mw)
    if allowed and cost > 0 then
      tokens = tokens - want
    end
    local remaining = math.max(0, floor_div(tokens, P))
    local reset = paused + ceil_div(cap - tokens, L)
    --@part eval_denied_b
    -- The key lives until the bucket is full again.
    return true, B, remaining, reset, wait, reset, cap - tokens, ts
  end,
  -- Refills to now as a check does, then takes amount x P off the units used.
  refund = function(L, P, B, now, amount, key, a, b)
    local tokens, ts = bucket_view(L, P, B, a, b, now)
    local used = B * P - tokens
    if used <= 0 then -- full, or no state at all
      return nil
    end
    if amount >= ceil_div(used, P) then
      used = 0
    else
      used = used - amount * P
    end
    -- A clock that went back: the refill resumes only at ts.
    return math.max(0, ts - now) + ceil_div(used, L), used, ts
  end,
}
