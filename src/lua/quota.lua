-- quota.lua: a quota lease (docs/quota_leasing.md). Mirrors pt_quota_grant()
-- in src/core/quota.c. Joined before policy.lua, which calls it when ARGV[2]
-- is 'q<cost>:<want>:<back>:<t0>':
--   back units of the previous lease (granted at Redis time t0) go back
--   first, to the windows still in the window of t0 (only there is giving
--   back exact); then every limit is peeked, and k units are taken as one
--   check of cost k, all-or-nothing, with
--     k = max(cost, min(want, floor(r / 8))), r the least remaining:
--   k <= r whenever cost <= r, and a check of cost k <= r passes exactly
--   when k checks of cost 1 would. cost itself is the caller's own check.
--   cost and want 0: the give-back alone (a handle that closes), k = 0.
-- Replies the 5 integers per limit of that check, then k (0 when denied)
-- and Redis's now in ms.
local function quota_grant(now)
  local c, want, back, t0 = string.match(ARGV[2], '^q(%d+):(%d+):(%d+):(%d+)$')
  c, want, back, t0 = tonumber(c), tonumber(want), tonumber(back), tonumber(t0)
  if c == nil or (c < 1) ~= (want < 1) then
    return redis.error_reply('porteiro: bad quota lease arguments')
  end
  local n, h, room, seen = #KEYS, {}, math.huge, {}
  for i = 1, n do
    local at = i * 4 - 1
    local code = tonumber(ARGV[at])
    local alg = algorithms[code]
    if alg == nil or code > 4 then
      return redis.error_reply('porteiro: a quota lease takes fixed_window, token_bucket, gcra ' ..
                               'and sliding_window limits only')
    end
    local L, P, B, key = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
                         KEYS[i]
    local a, b, cc = alg.load(key)
    -- The give-back: codes 1 and 4 are the windows, still in t0's window;
    -- once per key (items of a multi-key check that name one state share
    -- its key: src/core/call.c), as src/core/quota.c gives back once.
    if back > 0 and not seen[key] and code % 3 == 1 and a == floor_div(t0, P) and
       a == floor_div(now, P) then
      local ttl, na, nb, nc = alg.refund(L, P, B, now, back, key, a, b, cc)
      if na ~= nil then
        alg.store(key, now, ttl, na, nb, nc)
        if ttl <= 0 then
          na = nil
        end
        a, b, cc = na, nb, nc
      end
    end
    seen[key] = true
    local _, _, r = alg.eval(L, P, B, now, 0, key, a, b, cc, 0)
    room = math.min(room, r)
    h[i] = {alg, L, P, B, a, b, cc}
  end
  local k = math.max(c, math.min(want, floor_div(room, 8)))
  local all = true
  for i = 1, n do
    local x = h[i]
    x[8] = {x[1].eval(x[2], x[3], x[4], now, k, KEYS[i], x[5], x[6], x[7], 0)}
    all = all and x[8][1]
  end
  local out = {}
  for i = 1, n do
    local x = h[i]
    local r = x[8]
    if all and k > 0 then
      x[1].store(KEYS[i], now, r[6], r[7], r[8], r[9])
    elseif r[1] then
      -- Denied elsewhere: this limit took nothing; report it as it stands.
      r = {x[1].eval(x[2], x[3], x[4], now, 0, KEYS[i], x[5], x[6], x[7], 0)}
    end
    out[#out + 1] = r[1] and 1 or 0
    for j = 2, 5 do
      out[#out + 1] = r[j]
    end
  end
  out[#out + 1] = all and k or 0
  out[#out + 1] = now
  return out
end
