-- check/policy.lua: a policy of several limits of fixed_window, token_bucket,
-- gcra and sliding_window, one check or peek (cost >= 0), as a flat script:
-- one loop with a branch per algorithm, no function or closure made per
-- call, so that k limits in one call cost less than k single scripts (one
-- TIME, one GET per limit, one SET ... PX per limit when all allow). Each
-- branch computes exactly what its algorithm's check/*.lua and
-- src/core/algorithms.c compute, on the same stored values (see there, and
-- check/gcra.lua for why math.floor is exact here). Refunds and policies
-- holding a sliding_log run the general script (src/lua/policy.lua).
--
-- KEYS[i] the state key of limit i; ARGV[1] now ('' = Redis TIME); ARGV[2]
-- cost; ARGV[3 + 4(i-1) ..] algorithm code, L, P (ms), B of limit i;
-- ARGV[3 + 4n] the wait a reservation accepts, ms (absent: none).
-- A multi-key check (porteiro_check_request (.multi)) sends ARGV[2] = '' and six
-- values per limit: code, L, P, B, its own cost, and 1 when it is a shadow
-- item (its denial is reported but does not stop the others' writes); one
-- slot's share of a check over several Redis Cluster slots sends 's'
-- instead (src/limiter/spread.c) and gets more in the reply (below).
-- Returns 3 integers per limit: remaining, reset, retry, where retry 0
-- means allowed (a denial always has a retry of -1 or at least 1 ms),
-- retry below -1 allowed after a wait of -1 - retry ms (a reservation:
-- the policy waits for its slowest limit), and
-- the limit is the caller's own: every reply element costs Redis a
-- conversion. All-or-nothing: a limit that allowed while another denied
-- reports its state as it stands. With 's': then remaining and reset of
-- each limit as it stood before this call's writes (what the caller reports
-- when another slot denied and these units go back), and the now it judged
-- at, ms (what the give-back names: check/giveback.lua).
local floor, ceil = math.floor, math.ceil
local call, argv = redis.call, ARGV
local now = tonumber(argv[1])
if now == nil then
  local t = call('TIME')
  now = t[1] * 1000 + floor(t[2] / 1000)
end
local cost, stride, split = argv[2], 4, argv[2] == 's'
local per = split or cost == ''
if per then
  stride = 6
else
  cost = cost + 0
end
local n = #KEYS
local mw = tonumber(argv[3 + stride * n])
-- out: the reply, as the state stands; after: per limit that would write,
-- remaining and reset after the write (the reset is its TTL), the value,
-- and the wait before its units pass (0: none).
local out, after = {}, {}
local all = true
for i = 1, n do
  local at = 3 + (i - 1) * stride
  local code, L, P, B = argv[at] + 0, argv[at + 1] + 0, argv[at + 2] + 0, argv[at + 3] + 0
  local shadow = false
  if per then
    cost, shadow = argv[at + 4] + 0, argv[at + 5] == '1'
  end
  local v = call('GET', KEYS[i])
  local size = 16
  if code == 3 or code == 4 then
    size = 24
  end
  if v and #v ~= size then
    return redis.error_reply('WRONGTYPE porteiro: the limiter key holds no limiter state')
  end
  -- wait: ms until the check fits (-1: never); it takes the units now
  -- when that is 0, or within the wait a reservation accepts.
  local allowed, rem, reset, wait = true, 0, 0, 0
  local rem1, reset1, value
  if code == 3 then
    -- gcra: TAT - now in ticks of 1/L ms (rel), within a bound (beyond).
    local tau, rel, beyond = B * P, 0, 0
    if v then
      --@part gcra_view
    end
    rem, reset = floor((tau - rel) / P), beyond + ceil(rel / L)
    local nxt = rel + cost * P
    if cost > 0 then
      wait = -1
      if cost <= B then
        wait = 0
        if nxt > tau then
          wait = beyond + ceil((nxt - tau) / L)
        end
      end
      if wait == 0 or (mw and wait > 0 and wait <= mw) then
        local whole = floor(nxt / L)
        rem1, reset1 = floor((tau - nxt) / P), beyond + ceil(nxt / L)
        value = struct.pack('<ddd', now + beyond + whole, nxt - whole * L, L)
      else
        allowed = false
      end
    end
  elseif code == 2 then
    -- token_bucket: units used x P, refilled at L per ms since ts.
    local used, ts = 0, now
    if v then
      --@part token_bucket_view
    end
    local tokens, paused, want = B * P - used, ts - now, cost * P
    rem, reset = floor(tokens / P), paused + ceil(used / L)
    if cost > 0 then
      wait = -1
      if cost <= B then
        wait = 0
        if tokens < want then
          wait = paused + ceil((want - tokens) / L)
        end
      end
      if wait == 0 or (mw and wait > 0 and wait <= mw) then
        rem1, reset1 = floor((tokens - want) / P), paused + ceil((used + want) / L)
        value = struct.pack('<dd', used + want, ts)
      else
        allowed = false
      end
    end
  elseif code == 1 then
    -- fixed_window: the count of window w.
    local w, count = floor(now / P), 0
    if v then
      --@part fixed_window_view
    end
    local window_end = (w + 1) * P - now
    rem = L - count
    if count > 0 then
      reset = window_end
    end
    if cost > 0 then
      -- In the judged window once it begins, or in the next one.
      local later = cost > L - count
      wait = w * P - now
      if wait < 0 then
        wait = 0
      end
      --@part fixed_window_wait
      if wait == 0 or (mw and wait > 0 and wait <= mw) then
        if later then
          w, count, window_end = w + 1, 0, window_end + P
        end
        rem1, reset1 = L - count - cost, window_end
        value = struct.pack('<dd', w, count + cost)
      else
        allowed = false
      end
    end
  elseif code == 4 then
    -- sliding_window: the previous window weighted, compared x P.
    local w, shift, cur, prev = floor(now / P), 0, 0, 0
    if v then
      --@part sliding_window_view
    end
    local el = now + shift - w * P
    local weight = prev * (P - el)
    rem = floor((L * P - weight - cur * P) / P)
    if cur > 0 then
      reset = 2 * P - el + shift
    elseif prev > 0 then
      reset = P - el + shift
    end
    if cost > 0 then
      -- At the judged moment, later in this window, or in the next one,
      -- where the current count becomes the previous one.
      local later = false
      wait = -1
      if cost <= L then
        if weight + (cur + cost) * P <= L * P then
          wait = shift
        else
          --@part sliding_window_fit
        end
      end
      if wait == 0 or (mw and wait > 0 and wait <= mw) then
        if later then
          shift, el, w, prev, cur = shift + P - el, 0, w + 1, cur, 0
        end
        rem1 = floor((L * P - prev * (P - el) - (cur + cost) * P) / P)
        reset1 = 2 * P - el + shift
        value = struct.pack('<ddd', w, cur + cost, prev)
      else
        allowed = false
      end
    end
  else
    return redis.error_reply('porteiro: unknown algorithm ' .. tostring(argv[at]))
  end
  if rem < 0 then
    rem = 0
  end
  all = all and (allowed or shadow)
  local o = (i - 1) * 3
  out[o + 1], out[o + 2], out[o + 3] = rem, reset, allowed and 0 or wait
  if value then
    local h = (i - 1) * 4
    after[h + 1], after[h + 2], after[h + 3], after[h + 4] = rem1, reset1, value, wait
  end
end
if split then
  for i = 1, n do
    local o = (i - 1) * 3
    out[3 * n + 2 * i - 1], out[3 * n + 2 * i] = out[o + 1], out[o + 2]
  end
  out[5 * n + 1] = now
end
-- All-or-nothing: write only if every limit allowed; then each limit that
-- consumed reports its state after the write (its TTL is its reset), and
-- a reservation nothing left now and its wait.
if all then
  for i = 1, n do
    local h, o = (i - 1) * 4, (i - 1) * 3
    if after[h + 3] then
      call('SET', KEYS[i], after[h + 3], 'PX', after[h + 2])
      if after[h + 4] > 0 then
        out[o + 1], out[o + 2], out[o + 3] = 0, after[h + 2], -1 - after[h + 4]
      else
        out[o + 1], out[o + 2] = after[h + 1], after[h + 2]
      end
    end
  end
end
return out
