-- check/giveback.lua: a give-back (docs/cluster.md, "A check over several
-- slots"). A multi-key check whose items fall on several Redis Cluster
-- slots is decided per slot (src/limiter/spread.c); when it is not admitted
-- (a slot denied), the units the other slots took come back here, one call
-- per slot. A flat script, as check/policy.lua, with the same views of the
-- stored states; it gives back never more than the check took and the
-- state still holds (the safe side: under-admission, never over):
--   fixed_window   the units, while t0's window is stored and current
--                  (later they count nowhere): exact
--   sliding_window the units, from t0's window: the current count while it
--                  is current, the previous count in the next window (later
--                  they weigh nothing): exact
--   token_bucket   amount x P - L x (now - t0) scaled units: what refilled
--   gcra           since t0 may already have made up for the take (the
--                  bucket full, or the TAT at now, in between), so that much
--                  is kept; under by at most L x (now - t0) / P units
-- Nothing goes back when the clock reads before t0 (another node's), or a
-- stored window or TAT is ahead of its bound (a clock that went back).
--
-- KEYS[i] the state key of limit i (one slot); ARGV[1] now ('' = Redis
-- TIME); ARGV[2] t0, the Redis time (ms) the check was judged at on this
-- master (its reply said it); ARGV[3 + 5(i-1) ..] code, L, P (ms), B and
-- the units key i took. A key is given back once (items of one state share
-- it). Returns per key 1 when something went back, else 0.
local floor, ceil = math.floor, math.ceil
local call, argv = redis.call, ARGV
local now = tonumber(argv[1])
if now == nil then
  local t = call('TIME')
  now = t[1] * 1000 + floor(t[2] / 1000)
end
local t0 = tonumber(argv[2])
if t0 == nil or t0 < 0 then
  return redis.error_reply('porteiro: a give-back needs the time of its check')
end
local out, seen = {}, {}
for i = 1, #KEYS do
  local at = 3 + (i - 1) * 5
  local code, L, P, B = argv[at] + 0, argv[at + 1] + 0, argv[at + 2] + 0, argv[at + 3] + 0
  local amount, key = argv[at + 4] + 0, KEYS[i]
  local v = call('GET', key)
  local size = 16
  if code == 3 or code == 4 then
    size = 24
  end
  if v and #v ~= size then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
  out[i] = 0
  local value, ttl = nil, 0
  if v and not seen[key] and now >= t0 and amount > 0 then
    if code == 1 then
      local w, count = floor(now / P), 0
      --@part fixed_window_view
      if a == floor(t0 / P) and a == w and count > 0 then
        count = count - amount
        if count < 0 then
          count = 0
        end
        value, ttl = struct.pack('<dd', w, count), (w + 1) * P - now
        if count == 0 then
          ttl = 0
        end
      end
    elseif code == 2 then
      local used, ts = 0, now
      --@part token_bucket_view
      local g = amount * P - L * (now - t0)
      if g > 0 and used > 0 then
        used = used - g
        if used < 0 then
          used = 0
        end
        ttl = ts - now
        if ttl < 0 then
          ttl = 0
        end
        value, ttl = struct.pack('<dd', used, ts), ttl + ceil(used / L)
      end
    elseif code == 3 then
      local tau, rel, beyond = B * P, 0, 0
      --@part gcra_view
      local g = amount * P - L * (now - t0)
      if g > 0 and rel > 0 and beyond == 0 then
        rel = rel - g
        if rel < 0 then
          rel = 0
        end
        local whole = floor(rel / L)
        value, ttl = struct.pack('<ddd', now + whole, rel - whole * L, L), ceil(rel / L)
      end
    elseif code == 4 then
      local w, shift, cur, prev = floor(now / P), 0, 0, 0
      --@part sliding_window_view
      local wc, back = floor(t0 / P), false
      if shift == 0 and w == wc and cur > 0 then
        cur, back = cur - amount, true
        if cur < 0 then
          cur = 0
        end
      elseif shift == 0 and w == wc + 1 and prev > 0 then
        prev, back = prev - amount, true
        if prev < 0 then
          prev = 0
        end
      end
      if back then
        local el = now - w * P
        if cur > 0 then
          ttl = 2 * P - el
        elseif prev > 0 then
          ttl = P - el
        end
        value = struct.pack('<ddd', w, cur, prev)
      end
    else
      return redis.error_reply('porteiro: unknown algorithm ' .. tostring(argv[at]))
    end
    if value then
      if ttl > 0 then
        call('SET', key, value, 'PX', ttl)
      else
        call('DEL', key)
      end
      out[i] = 1
    end
  end
  seen[key] = true
end
return out
