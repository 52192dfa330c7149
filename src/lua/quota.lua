-- quota.lua: a quota lease (docs/quota_leasing.md). Mirrors pt_quota_grant()
-- in src/core/quota.c. Joined before policy.lua, which calls it when ARGV[2]
-- is 'q<cost>:<want>:<back>:<t0>[:<master>]':
--   back units of the previous lease (granted at Redis time t0 by the
--   master whose replication id is <master>) go back first, to the windows
--   still in the window of t0 (only there is giving back exact), and only
--   when this server is that master (a replica promoted since, or a master
--   restarted, never counted them) and the key was not reset at or after t0
--   (porteiro_reset leaves '<key>:reset' = its Redis ms); a sliding window
--   takes back at most its current count (the units are in it); then every
--   limit is peeked, and k units are taken as one check of cost k,
--   all-or-nothing, with
--     k = max(cost, min(want, floor(r / 8))), r the least remaining:
--   k <= r whenever cost <= r, and a check of cost k <= r passes exactly
--   when k checks of cost 1 would. cost itself is the caller's own check.
--   cost and want 0: the give-back alone (a handle that closes), k = 0.
-- Replies the 5 integers per limit of that check, then k (0 when denied),
-- Redis's now in ms and this master's replication id (the next give-back
-- names it).
local function quota_grant(now)
  local c, want, back, t0, m = string.match(ARGV[2], '^q(%d+):(%d+):(%d+):(%d+)(:?%x*)$')
  c, want, back, t0 = tonumber(c), tonumber(want), tonumber(back), tonumber(t0)
  if c == nil or (c < 1) ~= (want < 1) or (m ~= '' and m:byte() ~= 58) then
    return redis.error_reply('porteiro: bad quota lease arguments')
  end
  -- This master's replication id: the units go back only to the master
  -- that granted them (another, or none named, never counted them). INFO
  -- refused (ACL): no id, nothing goes back.
  local me = redis.pcall('INFO', 'replication')
  me = type(me) == 'string' and string.match(me, 'master_replid:(%x+)') or ''
  if m:sub(2) ~= me then
    back = 0
  end
  local n, h, room, seen = #KEYS, {}, math.huge, {}
  for i = 1, n do
    local at = i * 4 - 1
    local code = tonumber(ARGV[at])
    local alg = algorithms[code]
    if alg == nil or code > 4 then
      return redis.error_reply('porteiro: a quota lease takes fixed_window, token_bucket, ' ..
                               'gcra, sliding_window only')
    end
    local L, P, B, key = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
                         KEYS[i]
    local a, b, cc = alg.load(key)
    -- The give-back: codes 1 and 4 are the windows, still in t0's window;
    -- once per key (items of a multi-key check that name one state share
    -- its key: src/core/call.c); a sliding window's current count holds the units (never the
    -- previous one); nothing goes back to a key reset at or after t0.
    local give = 0
    if back > 0 and not seen[key] and code % 3 == 1 and a == floor_div(t0, P) and
       a == floor_div(now, P) and (tonumber(redis.call('GET', key .. ':reset')) or -1) < t0 then
      give = code == 4 and math.min(back, b) or back
    end
    if give > 0 then
      local ttl, na, nb, nc = alg.refund(L, P, B, now, give, key, a, b, cc)
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
  out[#out + 1] = me
  return out
end
