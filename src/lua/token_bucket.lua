-- token_bucket.lua: capacity B, continuous refill of L per P ms. Tokens are
-- stored multiplied by P so a refill of L per ms-tick loses no fraction.
-- Mirrors token_bucket() in src/algorithms.c.
-- Tokens (x P) and the refill timestamp at now; a clock that went back adds
-- nothing and keeps the stored timestamp. Mirrors pt_token_bucket_view().
local function bucket_view(L, P, B, a, b, now)
  local cap = B * P
  if a == nil then
    return cap, now
  end
  local tokens, ts = a, b
  if now > ts then
    -- Compare before multiplying, as the C code does.
    if now - ts >= ceil_div(cap - tokens, L) then
      tokens = cap
    else
      tokens = tokens + (now - ts) * L
    end
    ts = now
  end
  return tokens, ts
end

algorithms[2] = {
  load = load_hash,
  store = store_hash,
  eval = function(L, P, B, now, cost, key, a, b)
    local cap = B * P
    local tokens, ts = bucket_view(L, P, B, a, b, now)
    -- ms until the refill resumes: > 0 only when the clock went back.
    local paused = ts - now
    local want = cost * P
    local allowed = cost <= B and tokens >= want
    if allowed and cost > 0 then
      tokens = tokens - want
    end
    local remaining, reset = floor_div(tokens, P), paused + ceil_div(cap - tokens, L)
    if not allowed then
      return false, B, remaining, reset, (cost > B) and -1 or paused + ceil_div(want - tokens, L)
    end
    if cost == 0 then
      return true, B, remaining, reset, 0
    end
    -- The key lives until the bucket is full again.
    return true, B, remaining, reset, 0, reset, tokens, ts, 0
  end,
  -- Refills to now as a check does, then adds amount tokens, up to B.
  refund = function(L, P, B, now, amount, key, a, b)
    local cap = B * P
    local tokens, ts = bucket_view(L, P, B, a, b, now)
    if tokens >= cap then -- full, or no state at all
      return nil
    end
    if amount >= ceil_div(cap - tokens, P) then
      tokens = cap
    else
      tokens = tokens + amount * P
    end
    -- A clock that went back: the refill resumes only at ts.
    return math.max(0, ts - now) + ceil_div(cap - tokens, L), tokens, ts, 0
  end,
}
