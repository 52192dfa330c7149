-- KEYS[1]=counters' base key, ARGV[1]=limit, ARGV[2]=window (ms), ARGV[3]=cost
-- The least a sliding window counter needs, written for porteiro's
-- bench/compare.sh in the manner of gcra.lua and fixed_window.lua here: the
-- server's clock, its two reads (this window's counter and the previous
-- one's, one key per window, read with one MGET), then INCRBY (or SET PX on
-- the window's first hit). Floating point, no exactness guarantees: a
-- reference for cost, not for semantics.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = now - now % window
local key = KEYS[1] .. ':' .. start
local v = redis.call('MGET', key, KEYS[1] .. ':' .. (start - window))
local cur, prev = tonumber(v[1]) or 0, tonumber(v[2]) or 0
local estimate = prev * (window - (now - start)) / window + cur
if estimate + cost > limit then
  return {0, math.floor(limit - estimate), start + window - now}
end
if cur == 0 then
  redis.call('SET', key, cost, 'PX', start + 2 * window - now)
else
  redis.call('INCRBY', key, cost)
end
return {1, math.floor(limit - estimate - cost), start + window - now}
