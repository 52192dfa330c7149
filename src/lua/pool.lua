-- pool.lua: a region's pool of units of one global limit (docs/regions.md).
-- KEYS[1] the pool (a hash), KEYS[2] the refill mark (one refill at a time).
-- The pool: w (home's window or epoch of its units), n (units left), dl (this
-- Redis's ms after which none is spent), m (home's replication id), t0 (home's
-- ms of a grant of w), s and td (units taken since the last deposit, and its
-- ms: the region's demand), lw (the low water mark: a refill below it).
-- ARGV[1]:
--   't' want cost mark_ms [back bw]: the caller's unspent lease (back units
--       taken from window bw) goes back when the pool is still of bw, then
--       take k = max(cost, min(want, floor(n / 8))) units when n >= cost,
--       else none. Replies k, n, now, dl, refill (1: this caller refills:
--       n at or below lw and the mark was free), s, now - td, w (-1 none).
--   'd' w units life m t0 lw since: deposit a block of home's, its deadline
--       since + life (since: this Redis's now read before home was asked).
--       A pool missing, spent past its deadline, or of an older window is
--       replaced; the same window adds; an older window's block is dropped.
--       Replies units deposited, n, now, dl.
--   'x': drain: every unit of the pool, taken first so none is both spent
--       and returned. Replies n, w, t0, m (w -1: no live window).
local key, mark, op = KEYS[1], KEYS[2], ARGV[1]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local h = redis.call('HMGET', key, 'w', 'n', 'dl', 'm', 't0', 's', 'td', 'lw')
local w, n, dl, m, t0 = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0, h[4] or '',
                        tonumber(h[5]) or 0
local s, td, lw = tonumber(h[6]) or 0, tonumber(h[7]) or now, tonumber(h[8]) or 0
if now >= dl then
  n = 0
end
if op == 't' then
  local want, c, mk = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local back, bw = tonumber(ARGV[5] or '0'), tonumber(ARGV[6] or '-1')
  if want == nil or c == nil or mk == nil or c < 1 or want < c or mk < 1 or back == nil or
     bw == nil or back < 0 then
    return redis.error_reply('porteiro: bad pool take')
  end
  -- The caller's unspent lease of this same window goes back first.
  if back > 0 and w ~= nil and bw == w and now < dl then
    n = n + back
    s = math.max(0, s - back)
  end
  local k = 0
  if n >= c then
    k = math.max(c, math.min(want, math.floor(n / 8)))
    n = n - k
  end
  -- The demand: what was taken, or asked of an empty pool.
  s = s + (k > 0 and k or c)
  if h[7] == false then
    redis.call('HSET', key, 'n', n, 's', s, 'td', now)
    redis.call('PEXPIRE', key, 60000)
  else
    redis.call('HSET', key, 'n', n, 's', s)
  end
  local refill = 0
  if n <= lw and redis.call('SET', mark, '1', 'PX', mk, 'NX') then
    refill = 1
  end
  return {k, n, now, dl, refill, s, now - td, w or -1}
elseif op == 'd' then
  local w2, u, life, t02 = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6])
  local m2, lw2, since = ARGV[5], tonumber(ARGV[7]), tonumber(ARGV[8])
  if w2 == nil or u == nil or life == nil or t02 == nil or lw2 == nil or since == nil then
    return redis.error_reply('porteiro: bad pool deposit')
  end
  redis.call('DEL', mark)
  local dl2 = since + life
  if u <= 0 or dl2 <= now or (w ~= nil and now < dl and w2 < w) then
    return {0, n, now, dl}
  end
  if w == nil or now >= dl or w2 > w then
    n, dl, m, t0 = u, dl2, m2, t02
  else
    n, dl = n + u, math.min(dl, dl2)
    if m ~= m2 then
      m = ''
    end
  end
  redis.call('HSET', key, 'w', w2, 'n', n, 'dl', dl, 'm', m, 't0', t0, 's', 0, 'td', now, 'lw', lw2)
  redis.call('PEXPIRE', key, dl - now + 60000)
  return {u, n, now, dl}
elseif op == 'x' then
  if w == nil or now >= dl then
    return {0, -1, 0, ''}
  end
  redis.call('HSET', key, 'n', 0)
  return {n, w, t0, m}
end
return redis.error_reply('porteiro: bad pool operation')
