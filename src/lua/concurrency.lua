-- concurrency.lua: leases, a sorted set per client key (member = lease id,
-- score = expiry in ms). Expired leases (expiry <= now) are removed on every
-- call, and the key expires with its last lease. Mirrors src/leases.c.
--
-- KEYS[1] the lease key; ARGV[1] now (or '' for Redis TIME);
-- ARGV[2] 'acquire' | 'release' | 'renew'; ARGV[3] the lease id;
-- ARGV[4] L (acquire); ARGV[5] lease_ms (acquire, renew).
local function lease_expire_key(key, now)
  local v = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
  if v[2] ~= nil then
    redis.call('PEXPIRE', key, int_text(tonumber(v[2]) - now))
  end
end

local lease_ops = {}

-- Returns allowed (1/0), L, remaining, reset_ms, retry_after_ms.
lease_ops.acquire = function(key, now, id, L, lease_ms)
  local n = redis.call('ZCARD', key)
  local allowed = n < L
  if allowed then
    redis.call('ZADD', key, int_text(now + lease_ms), id)
    n = n + 1
    lease_expire_key(key, now)
  end
  local reset, retry = 0, 0
  if n > 0 then
    local last = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
    reset = tonumber(last[2]) - now
  end
  if not allowed then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    retry = tonumber(first[2]) - now
  end
  return { allowed and 1 or 0, L, math.max(0, L - n), reset, retry }
end

-- Returns 1 if the lease was live (and is now gone), else 0.
lease_ops.release = function(key, now, id)
  local removed = redis.call('ZREM', key, id)
  lease_expire_key(key, now)
  return removed
end

-- Returns 1 if the lease was live (and now lasts lease_ms more), else 0.
lease_ops.renew = function(key, now, id, L, lease_ms)
  if redis.call('ZSCORE', key, id) == false then
    return 0
  end
  redis.call('ZADD', key, 'XX', int_text(now + lease_ms), id)
  lease_expire_key(key, now)
  return 1
end

local function lease_command(key, now, argv)
  local op = lease_ops[argv[2]]
  if op == nil then
    return redis.error_reply('porteiro: unknown lease operation')
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int_text(now))
  return op(key, now, argv[3], tonumber(argv[4]), tonumber(argv[5]))
end
