-- sliding_log.lua: checkLog of core.go. State: a sorted set with one member
-- per admitted token, scored by its µs. Sliding logs are strict (never
-- leased), so the script only checks and keeps no holders.
--
-- Members must be unique even when several tokens share one microsecond (a
-- cost above 1, or two calls within the same µs): a member is "<µs>:<n>",
-- n counting on from the members already at that score. Entries leave only
-- by score range or with the whole key, so the members at one score are
-- always "<µs>:1" .. "<µs>:k" and the next n is k+1.

local function append(now, cost)
  local stamp = fmt(now)
  local base = redis.call('ZCOUNT', key, stamp, stamp)
  local prefix, args = stamp .. ':', {}
  for i = 1, cost do
    -- base + i is at most the limit (10,000): Lua's 14-digit number
    -- formatting writes it exactly.
    args[2 * i - 1] = stamp
    args[2 * i] = prefix .. (base + i)
  end
  call_chunked('ZADD', args)
end

-- score returns the score of the entry at a 0-based rank (-1: the newest).
local function score(rank)
  local e = redis.call('ZRANGE', key, fmt(rank), fmt(rank), 'WITHSCORES')
  return tonumber(e[2])
end

local function check(now, cost)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
  local n = redis.call('ZCARD', key)
  local allowed, retry, count = 0, 0, n
  if n + cost <= limit then
    -- No earlier than the newest entry: after the clock steps back, entries
    -- must not leave the log early.
    local at = now
    if n > 0 then
      at = math.max(at, score(-1))
    end
    append(at, cost)
    count = n + math.max(cost, 0)
    allowed = 1
  else
    retry = score(n + cost - limit - 1) + period - now
  end
  local reset = 0
  if count > 0 then
    reset = score(-1) + period - now
    redis.call('PEXPIRE', key, fmt(math.max(1, math.ceil(reset / 1000))))
  end
  return { allowed, limit - count, retry, reset }
end

-- acquire is core.go's reportLog: sliding logs are strict, so an acquire
-- only reports consumption admitted age ago, logged while still inside the
-- period, no earlier than the newest entry, up to the limit.
local function acquire(now, req)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
  local n = redis.call('ZCARD', key)
  local at = now - req.age
  if at > now - period and req.consumed > 0 then
    if n > 0 then
      at = math.max(at, score(-1))
    end
    local add = math.min(req.consumed, limit - n)
    if add > 0 then
      append(at, add)
      n = n + add
    end
  end
  if n > 0 then
    redis.call('PEXPIRE', key, fmt(math.max(1, math.ceil((score(-1) + period - now) / 1000))))
  end
  return { 0, limit - n, ttl, 0, 0, 0, '0' }
end

return dispatch(acquire, nil, check)
