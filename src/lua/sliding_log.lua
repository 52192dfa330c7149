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

algorithms[5] = {
  load = function(key)
    return { key = key }
  end,
  eval = function(l, st, now, cost)
    local P, L = l.P, l.L
    local cutoff = now - P
    local count = log_count(st.key, cutoff)
    local newest = nil
    if count > 0 then
      newest = log_newest(st.key)
    end
    local e = { allowed = cost <= L - count, limit = L, retry = 0 }
    if e.allowed and cost > 0 then
      count = count + cost
      if newest == nil or now > newest then
        newest = now
      end
      e.write = true
      e.next = st
      e.op = { add = cost, at = now, cutoff = cutoff }
    end
    e.remaining = math.max(0, L - count)
    e.reset = (count > 0) and (newest + P - now) or 0
    e.ttl = e.reset
    if not e.allowed then
      if cost > L then
        e.retry = -1
      else
        -- The (count + cost - L)-th oldest live unit must have left.
        local v = redis.call('ZRANGE', st.key, '(' .. int_text(cutoff), '+inf', 'BYSCORE',
                             'LIMIT', count + cost - L - 1, 1, 'WITHSCORES')
        e.retry = tonumber(v[2]) + P - now
      end
    end
    return e
  end,
  refund = function(l, st, now, amount)
    local cutoff = now - l.P
    local count = log_count(st.key, cutoff)
    if count == 0 then
      return { write = false }
    end
    return { write = true, next = st, op = { take = amount, cutoff = cutoff } }
  end,
  store = function(key, e)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int_text(e.op.cutoff))
    if e.op.take ~= nil then
      redis.call('ZREMRANGEBYRANK', key, int_text(-e.op.take), -1)
      local newest = log_newest(key)
      if newest ~= nil then
        redis.call('PEXPIRE', key, int_text(newest - e.op.cutoff))
      end
      return
    end
    log_add(key, e.op.at, e.op.add)
    redis.call('PEXPIRE', key, int_text(e.ttl))
  end,
}
