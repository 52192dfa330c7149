-- batch.lua: the entry point of a batch. One call decides many checks, each
-- one all-or-nothing over its own limits and exactly as policy.lua would
-- decide it alone, in order (a later check sees what an earlier one wrote).
-- The batch itself is not atomic as a whole: each check is.
--
-- KEYS     the keys of every check, check after check
-- ARGV[1]  the number of checks m; -m when each check carries a wait
-- then per check: now in ms (or '' for the Redis clock, read once per
--          batch), cost (>= 0), the number of limits n, [with -m: the wait
--          a reservation accepts, 0: none], then per limit the algorithm
--          code, L, P (ms), B
-- Returns, per check in order, 5 integers per limit (as policy.lua), or
-- one error string when that check failed alone (WRONGTYPE...).
local m = tonumber(ARGV[1])
local waits = 0 -- 1: each check carries its max_wait after n
if m < 0 then
  m, waits = -m, 1
end
local clock = nil
local out = {}
local o = 0

-- Decides one check whose keys start after KEYS[kb] and arguments after
-- ARGV[ab]; writes its answer into out after o. Returns the new o.
local function decide(kb, ab, n, now, cost, mw, o)
  if n == 1 then -- one limit: its answer is the check's, written at once
    local alg = algorithms[tonumber(ARGV[ab])]
    if alg == nil then
      error({err = 'porteiro: unknown algorithm ' .. tostring(ARGV[ab])})
    end
    local key = KEYS[kb + 1]
    local a, b, c = alg.load(key)
    local allowed, limit, remaining, reset, retry, ttl, na, nb, nc =
      alg.eval(tonumber(ARGV[ab + 1]), tonumber(ARGV[ab + 2]), tonumber(ARGV[ab + 3]), now,
               cost, key, a, b, c, mw)
    if na ~= nil then
      alg.store(key, now, ttl, na, nb, nc)
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] =
      allowed and 1 or 0, limit, remaining, reset, retry
    return o + 5
  end
  local all = true
  local held = {}
  for i = 1, n do
    local at = ab + (i - 1) * 4
    local alg = algorithms[tonumber(ARGV[at])]
    if alg == nil then
      error({err = 'porteiro: unknown algorithm ' .. tostring(ARGV[at])})
    end
    local L, P, B = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local key = KEYS[kb + i]
    local a, b, c = alg.load(key)
    local allowed, limit, remaining, reset, retry, ttl, na, nb, nc =
      alg.eval(L, P, B, now, cost, key, a, b, c, mw)
    local r = o + (i - 1) * 5
    out[r + 1], out[r + 2], out[r + 3], out[r + 4], out[r + 5] =
      allowed and 1 or 0, limit, remaining, reset, retry
    all = all and allowed
    if na ~= nil then
      held[i] = {alg, L, P, B, a, b, c, ttl, na, nb, nc}
    end
  end
  for i = 1, n do
    local h = held[i]
    if h ~= nil then
      local key = KEYS[kb + i]
      if all then
        h[1].store(key, now, h[8], h[9], h[10], h[11])
      else
        -- Denied elsewhere: this limit consumed nothing, report it as it stands.
        local r = o + (i - 1) * 5
        local allowed, limit, remaining, reset, retry =
          h[1].eval(h[2], h[3], h[4], now, 0, key, h[5], h[6], h[7], 0)
        out[r + 1], out[r + 2], out[r + 3], out[r + 4], out[r + 5] =
          allowed and 1 or 0, limit, remaining, reset, retry
      end
    end
  end
  return o + n * 5
end

local kb, ab = 0, 2
for j = 1, m do
  local now = tonumber(ARGV[ab])
  if now == nil then
    if clock == nil then
      local t = redis.call('TIME')
      clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    now = clock
  end
  local cost, n, mw = tonumber(ARGV[ab + 1]), tonumber(ARGV[ab + 2]), 0
  if waits == 1 then
    mw = tonumber(ARGV[ab + 3])
  end
  local ok, res = pcall(decide, kb, ab + 3 + waits, n, now, cost, mw, o)
  if ok then
    o = res
  else
    -- This check alone failed (nothing was written: the writes come last);
    -- what it put in out before failing goes.
    for k = o + 2, o + n * 5 do
      out[k] = nil
    end
    o = o + 1
    out[o] = type(res) == 'table' and (res.err or 'porteiro: error') or tostring(res)
  end
  kb = kb + n
  ab = ab + 3 + waits + n * 4
end
return out
