-- token_bucket.lua: capacity B, continuous refill of L per P ms. Tokens are
-- stored multiplied by P so a refill of L per ms-tick loses no fraction.
-- Mirrors token_bucket() in src/algorithms.c.
-- Tokens (x P) and the refill timestamp at now; a clock that went back adds
-- nothing and keeps the stored timestamp. Mirrors pt_token_bucket_view().
local function bucket_view(l, st, now)
  local cap = l.B * l.P
  if st == nil then
    return cap, now
  end
  local tokens, ts = st.a, st.b
  if now > ts then
    -- Compare before multiplying, as the C code does.
    if now - ts >= ceil_div(cap - tokens, l.L) then
      tokens = cap
    else
      tokens = tokens + (now - ts) * l.L
    end
    ts = now
  end
  return tokens, ts
end

algorithms[2] = {
  load = load_hash,
  store = store_hash,
  eval = function(l, st, now, cost)
    local cap = l.B * l.P
    local tokens, ts = bucket_view(l, st, now)
    -- ms until the refill resumes: > 0 only when the clock went back.
    local paused = ts - now
    local want = cost * l.P
    local e = { allowed = cost <= l.B and tokens >= want, limit = l.B, retry = 0 }
    if e.allowed and cost > 0 then
      tokens = tokens - want
      e.write = true
      e.next = { a = tokens, b = ts, c = 0 }
      e.ttl = paused + ceil_div(cap - tokens, l.L)
    end
    e.remaining = floor_div(tokens, l.P)
    e.reset = paused + ceil_div(cap - tokens, l.L)
    if not e.allowed then
      e.retry = (cost > l.B) and -1 or paused + ceil_div(want - tokens, l.L)
    end
    return e
  end,
  -- Refills to now as a check does, then adds amount tokens, up to B.
  refund = function(l, st, now, amount)
    local cap = l.B * l.P
    local tokens, ts = bucket_view(l, st, now)
    if tokens >= cap then -- full, or no state at all
      return { write = false }
    end
    if amount >= ceil_div(cap - tokens, l.P) then
      tokens = cap
    else
      tokens = tokens + amount * l.P
    end
    -- A clock that went back: the refill resumes only at ts.
    return { write = true, next = { a = tokens, b = ts, c = 0 },
             ttl = math.max(0, ts - now) + ceil_div(cap - tokens, l.L) }
  end,
}
