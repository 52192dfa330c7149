-- settle.lua: a settle (issue 38; src/core/settle.h): an admitted check's
-- real cost. Joined after common.lua and the counter algorithms (1..4) into
-- pt_scripts[PT_SCRIPT_SETTLE] (cmake/embed_lua.cmake). Mirrors
-- src/core/settle.c; the give-back is each algorithm's refund, except in
-- a window when the check's age is known (see give_back).
--
-- KEYS[i]  the state key of limit i (all share one hash tag: one slot)
-- ARGV[1]  now in ms, or '' to read the Redis clock
-- ARGV[2]  delta = used - estimate: < 0 given back, > 0 charged whatever
--          remains (past empty: debt), 0 nothing; '': each limit has its
--          own (a multi-key settle), after its B
-- ARGV[3 + 4(i-1) ..]  algorithm code (1..4), L, P (ms), B of limit i
--          (5 values with its delta: ARGV[3 + 5(i-1) ..])
-- ARGV[3 + 4n] (or 5n)  ms since the settled check was decided (absent:
--          unknown)
-- Returns 6 integers per limit: 1, limit, remaining, reset_ms, 0 (a peek
-- of the state after the settle), its debt in units; then the most debt
-- the charge added in one limit.
--
-- A BATCH of settles (pt_batch_scripts[PT_BATCH_SETTLE], the same text;
-- redis/batch.c): ARGV[1] 'b', ARGV[2] m, then per settle: now ('': the
-- Redis clock, read once), delta ('': per limit, after its B), n, the n
-- limits (4 or 5 values each), age in ms ('': unknown); its keys follow
-- the previous settle's in KEYS. Returns per settle in order its 6n + 1
-- integers, or one error string when it failed alone. Each settle is
-- exactly as alone; the batch is not atomic as a whole.

-- 2^51: PT_SETTLE_MAX_AHEAD, the most scaled units a charge fills a
-- state to (at least L units past empty, since L x P <= 2^50).
local MAX_AHEAD = 2251799813685248

-- The units of amount that fit below MAX_AHEAD, each scale of them.
local function fits(amount, ahead, scale)
  local room = MAX_AHEAD - ahead
  if room <= 0 then
    return 0
  end
  return math.min(amount, floor_div(room, scale))
end

-- TAT - now in ticks, the whole ms beyond the view's bound included.
local function gcra_ahead(L, rel, beyond)
  if beyond > floor_div(MAX_AHEAD - rel, L) then
    return MAX_AHEAD
  end
  return beyond * L + rel
end

-- charge(L, P, B, now, x, a, b, c) -> ttl, na, nb, nc: x units taken
-- whatever remains.
local charges = {
  function(L, P, B, now, x, a, b)
    local w = floor_div(now, P)
    if a ~= nil and a > w then
      w = a
    end
    local count = 0
    if a == w then
      count = b
    end
    count = count + fits(x, count, 1)
    return (w + 1) * P - now, w, count
  end,
  function(L, P, B, now, x, a, b)
    local tokens, ts = bucket_view(L, P, B, a, b, now)
    local used = B * P - tokens
    used = used + fits(x, used, P) * P
    return math.max(0, ts - now) + ceil_div(used, L), used, ts
  end,
  function(L, P, B, now, x, a, b, c)
    local rel, beyond = tat_view(L, P, B, a, b, c, now)
    rel = rel + fits(x, gcra_ahead(L, rel, beyond), P) * P
    local whole = floor_div(rel, L)
    return beyond + ceil_div(rel, L), now + beyond + whole, rel - whole * L, L
  end,
  function(L, P, B, now, x, a, b, c)
    local w, el, shift, cur, prev = window_view(P, a, b, c, now)
    cur = cur + fits(x, cur * P, P)
    return shift + 2 * P - el, w, cur, prev
  end,
}

-- A give-back (ttl, na, nb, nc, or nothing). A window gives back only
-- into the window the check counted in, when its age is known (age >= 0):
-- the current one (a refund), a sliding window's previous one (from that
-- count alone), else nothing. Mirrors give_back() in src/core/settle.c.
local function give_back(code, alg, L, P, B, now, amount, age, key, a, b, c)
  if age >= 0 and code % 3 == 1 then -- codes 1 and 4: the windows
    local wn, wa = floor_div(now, P), floor_div(now - age, P)
    if wa ~= wn then
      if code ~= 4 or wa ~= wn - 1 then
        return nil
      end
      local w, el, shift, cur, prev = window_view(P, a, b, c, now)
      if w ~= wn or prev == 0 then
        return nil
      end
      prev = math.max(0, prev - amount)
      local ttl = 0
      if cur > 0 then
        ttl = 2 * P - el
      elseif prev > 0 then
        ttl = P - el
      end
      return ttl, w, cur, prev
    end
  end
  return alg.refund(L, P, B, now, amount, key, a, b, c)
end

-- The units past empty at now (0: none). Mirrors pt_algorithm_debt().
local function debt(code, L, P, B, now, a, b, c)
  local over = 0
  if code == 1 then
    local w = floor_div(now, P)
    if a ~= nil and a > w then
      w = a
    end
    if a == w then
      return math.max(0, b - L)
    end
    return 0
  elseif code == 2 then
    over = -bucket_view(L, P, B, a, b, now)
  elseif code == 3 then
    local rel, beyond = tat_view(L, P, B, a, b, c, now)
    over = gcra_ahead(L, rel, beyond) - B * P
  else
    local w, el, shift, cur, prev = window_view(P, a, b, c, now)
    over = prev * (P - el) + cur * P - L * P
  end
  if over > 0 then
    return ceil_div(over, P)
  end
  return 0
end

-- The Redis clock, in ms.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- True when a limit of the settle whose arguments start at ARGV[ab] has an
-- algorithm a settle cannot take.
local function unsettleable(ab, n, stride)
  for i = 1, n do
    if charges[tonumber(ARGV[ab + (i - 1) * stride])] == nil then
      return true
    end
  end
  return false
end
local UNSETTLEABLE = 'porteiro: a settle takes fixed_window, token_bucket, gcra and ' ..
                     'sliding_window limits only'

-- Settles the n limits whose keys follow KEYS[kb] and whose arguments
-- start at ARGV[ab] (stride 4, or 5 with each its delta); appends its
-- 6n + 1 integers to out after o. Returns the new o.
local function settle(kb, ab, n, now, delta, stride, age, out, o)
  local added = 0
  for i = 1, n do
    local at = ab + (i - 1) * stride
    local code = tonumber(ARGV[at])
    if stride == 5 then
      delta = tonumber(ARGV[at + 4])
    end
    local alg, key = algorithms[code], KEYS[kb + i]
    local L, P, B = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local a, b, c = alg.load(key)
    local before = debt(code, L, P, B, now, a, b, c)
    local ttl, na, nb, nc
    if delta < 0 then
      ttl, na, nb, nc = give_back(code, alg, L, P, B, now, -delta, age, key, a, b, c)
    elseif delta > 0 then
      ttl, na, nb, nc = charges[code](L, P, B, now, delta, a, b, c)
    end
    if na ~= nil then
      alg.store(key, now, ttl, na, nb, nc)
      if ttl <= 0 then
        na = nil
      end
      a, b, c = na, nb, nc
    end
    local _, limit, remaining, reset = alg.eval(L, P, B, now, 0, key, a, b, c, 0)
    local d = debt(code, L, P, B, now, a, b, c)
    added = math.max(added, d - before)
    local r = o + (i - 1) * 6
    out[r + 1], out[r + 2], out[r + 3], out[r + 4], out[r + 5], out[r + 6] =
      1, limit, remaining, reset, 0, d
  end
  out[o + n * 6 + 1] = added
  return o + n * 6 + 1
end

if ARGV[1] == 'b' then
  local m, kb, ab, o, out, t = tonumber(ARGV[2]), 0, 3, 0, {}, nil
  for j = 1, m do
    local now = tonumber(ARGV[ab])
    if now == nil then
      t = t or clock()
      now = t
    end
    local delta, stride = tonumber(ARGV[ab + 1]), 4
    if ARGV[ab + 1] == '' then
      stride = 5
    end
    local n = tonumber(ARGV[ab + 2])
    local age = tonumber(ARGV[ab + 3 + stride * n]) or -1
    if unsettleable(ab + 3, n, stride) then
      o = o + 1
      out[o] = UNSETTLEABLE
    else
      local ok, res = pcall(settle, kb, ab + 3, n, now, delta, stride, age, out, o)
      if ok then
        o = res
      else -- this settle alone failed (WRONGTYPE...): its partial answer goes
        for k = o + 2, o + n * 6 + 1 do
          out[k] = nil
        end
        o = o + 1
        out[o] = type(res) == 'table' and (res.err or 'porteiro: error') or tostring(res)
      end
    end
    kb = kb + n
    ab = ab + 4 + stride * n
  end
  return out
end

local now = tonumber(ARGV[1])
if now == nil then
  now = clock()
end
local delta, stride = tonumber(ARGV[2]), 4
if ARGV[2] == '' then
  stride = 5
end
local n = #KEYS
local age = tonumber(ARGV[3 + stride * n]) or -1
if unsettleable(3, n, stride) then
  return redis.error_reply(UNSETTLEABLE)
end
local out = {}
settle(0, 3, n, now, delta, stride, age, out, 0)
return out
