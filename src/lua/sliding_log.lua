-- sliding_log.lua: the exact log, a sorted set per key with one member per
-- unit of cost, scored by the ms it was written at; an entry counts while
-- its time > now - P. Members are "time:sequence" (sequence zero-padded and
-- above the highest one at that ms) so they never collide. Mirrors
-- sliding_log() in src/algorithms.c, which keeps weighted entries instead.
local function log_count(key, cutoff)
  return redis.call('ZCOUNT', key, '(' .. int_text(cutoff), '+inf')
end

-- The time of the newest entry, or nil.
local function log_newest(key)
  local v = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
  if v[2] == nil then
    return nil
  end
  return tonumber(v[2])
end

-- Adds n units at time now, in batches (Lua's unpack has a stack limit).
local function log_add(key, now, n)
  local top = redis.call('ZRANGE', key, int_text(now), int_text(now), 'BYSCORE', 'REV',
                         'LIMIT', 0, 1)
  local seq = 0
  if top[1] ~= nil then
    seq = tonumber(string.match(top[1], ':(%d+)$')) or 0
  end
  local stamp = int_text(now)
  local args = {}
  for i = 1, n do
    args[#args + 1] = stamp
    args[#args + 1] = stamp .. ':' .. string.format('%010d', seq + i)
    if #args >= 1000 or i == n then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
end

-- The state is the sorted set itself: load reads nothing, eval and refund
-- query the key, and what they return for store is an operation: na units
-- to add at now - nb when nb <= 0 (a reservation's are at now + wait), nb
-- > 0 newest units to take back, entries <= nc to drop.
algorithms[5] = {
  load = function()
    return nil
  end,
  eval = function(L, P, B, now, cost, key, a, b, c, mw)
    local cutoff = now - P
    local count = log_count(key, cutoff)
    local newest = nil
    if count > 0 then
      newest = log_newest(key)
    end
    -- ms until the (count + cost - L)-th oldest live unit has left (-1:
    -- never); within mw, a reservation writes the units at now + wait.
    local wait = -1
    if cost <= L - count then
      wait = 0
    elseif cost > 0 and cost <= L then
      local v = redis.call('ZRANGE', key, '(' .. int_text(cutoff), '+inf', 'BYSCORE',
                           'LIMIT', count + cost - L - 1, 1, 'WITHSCORES')
      wait = tonumber(v[2]) + P - now
    end
    local allowed = cost == 0 or (wait >= 0 and wait <= mw)
    if allowed and cost > 0 then
      count = count + cost
      if newest == nil or now + wait > newest then
        newest = now + wait
      end
    end
    local remaining, reset = math.max(0, L - count), (count > 0) and (newest + P - now) or 0
    if allowed then
      --@part eval_peek
      -- store's take slot carries -wait: the units are written at now + wait.
      return true, L, remaining, reset, wait, reset, cost, -wait, cutoff
    end
    return false, L, remaining, reset, wait
  end,
  refund = function(L, P, B, now, amount, key)
    local cutoff = now - P
    if log_count(key, cutoff) == 0 then
      return nil
    end
    return 0, 0, amount, cutoff
  end,
  store = function(key, now, ttl, add, take, cutoff)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int_text(cutoff))
    if take > 0 then
      redis.call('ZREMRANGEBYRANK', key, int_text(-take), -1)
      local newest = log_newest(key)
      if newest ~= nil then
        redis.call('PEXPIRE', key, int_text(newest - cutoff))
      end
      return
    end
    log_add(key, now - take, add) -- take <= 0: -wait, see eval
    redis.call('PEXPIRE', key, int_text(ttl))
  end,
}
