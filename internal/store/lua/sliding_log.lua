-- sliding_log.lua: checkLog and reportLog of core_log.go. State: a sorted set
-- with one member per admitted request, "<µs>:<n>:<last>": n tokens
-- stamped at µs, the last of them numbered last, the member's score. The
-- log numbers its tokens on from 1 since it was last empty (the key is gone
-- then), so members are unique, scores ascend with stamps, the count is a
-- difference of two numbers and the k-th oldest token is one ZRANGEBYSCORE:
-- a call reads O(log n) entries, whatever its cost argument, and expired
-- entries leave in one ZREMRANGEBYRANK. Sliding logs are strict (never
-- leased), so the script only checks and keeps no holders.
-- The key is "<prefix>:sl2:{rule|key}" (see redis.go): the layout of one
-- member per token, "sl", is never read, so that allocators of both
-- layouts, side by side during a rolling deploy, never meet each other's
-- keys.

-- Scores are doubles, exact below 2^53. A log that never empties is
-- numbered from 1 again before its numbers pass this.
local renumber_above = 2 ^ 50

local function member(at, n, last)
  return fmt(at) .. ':' .. fmt(n) .. ':' .. fmt(last)
end

local function parse(m)
  local at, n, last = string.match(m, '^([^:]+):([^:]+):([^:]+)$')
  return { at = tonumber(at), n = tonumber(n), last = tonumber(last) }
end

-- entry returns the entry at a 0-based rank (-1: the newest), or nil.
local function entry(rank)
  local m = redis.call('ZRANGE', key, fmt(rank), fmt(rank))[1]
  if m == nil then
    return nil
  end
  return parse(m)
end

-- log_count is core_log.go's slidingLog.count, of the oldest and newest
-- entries.
local function log_count(first, newest)
  if first == nil then
    return 0
  end
  return newest.last - (first.last - first.n)
end

-- renumber numbers the log's tokens from 1 again. Only differences of
-- numbers mean anything, so no decision changes. It rewrites each entry
-- (at most one per token of the limit) once per 2^50 tokens logged.
local function renumber()
  local all = redis.call('ZRANGE', key, 0, -1)
  local first = parse(all[1])
  local base = first.last - first.n
  local args = {}
  for i = 1, #all do
    local e = parse(all[i])
    args[2 * i - 1] = fmt(e.last - base)
    args[2 * i] = member(e.at, e.n, e.last - base)
  end
  redis.call('DEL', key)
  call_chunked('ZADD', args)
end

-- append_log is core_log.go's slidingLog.add: n tokens at, or at the newest
-- entry's stamp if that is later. It returns the new newest entry.
local function append_log(newest, at, n)
  if newest ~= nil and newest.last + n > renumber_above then
    renumber()
    newest = entry(-1)
  end
  local e = { at = at, n = n, last = n }
  if newest ~= nil then
    e.at = math.max(at, newest.at)
    e.last = e.last + newest.last
  end
  redis.call('ZADD', key, fmt(e.last), member(e.at, e.n, e.last))
  return e
end

-- drop_log is core_log.go's slidingLog.drop: the entries stamped at or
-- before cutoff are a prefix of the ranks, found by galloping from the
-- oldest, then bisecting: O(log m) reads for m entries dropped, one
-- ZREMRANGEBYRANK.
local function drop_log(cutoff)
  local first = entry(0)
  if first == nil or first.at > cutoff then
    return
  end
  -- Ranks up to lo are at or before cutoff; hi is the first rank known to
  -- be after it, or the size.
  local size = redis.call('ZCARD', key)
  local lo, hi, step = 0, size, 1
  while lo + step < size do
    if entry(lo + step).at > cutoff then
      hi = lo + step
      break
    end
    lo = lo + step
    step = step * 2
  end
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    if entry(mid).at > cutoff then
      hi = mid
    else
      lo = mid
    end
  end
  redis.call('ZREMRANGEBYRANK', key, 0, fmt(lo))
end

-- stamp_of is core_log.go's slidingLog.stampOf: the stamp of the k-th
-- oldest token, the first entry whose last token is numbered at least the
-- oldest's plus k-1.
local function stamp_of(first, k)
  local want = first.last - first.n + k
  local m = redis.call('ZRANGEBYSCORE', key, fmt(want), '+inf', 'LIMIT', 0, 1)[1]
  return parse(m).at
end

local function check(now, cost)
  drop_log(now - period)
  local first, newest = entry(0), entry(-1)
  local n = log_count(first, newest)
  local allowed, retry, count = 0, 0, n
  if n + cost <= limit then
    if cost > 0 then
      newest = append_log(newest, now, cost)
    end
    count = n + math.max(cost, 0)
    allowed = 1
  else
    -- When the oldest tokens that must leave for cost to fit have left.
    retry = stamp_of(first, n + cost - limit) + period - now
  end
  local reset = 0
  if count > 0 then
    reset = newest.at + period - now
    redis.call('PEXPIRE', key, fmt(math.max(1, math.ceil(reset / 1000))))
  end
  return { allowed, limit - count, retry, reset }
end

-- acquire is core_log.go's reportLog: sliding logs are strict, so an acquire
-- only reports consumption admitted age ago, logged while still inside the
-- period, no earlier than the newest entry, up to the limit.
local function acquire(now, req)
  drop_log(now - period)
  local first, newest = entry(0), entry(-1)
  local n = log_count(first, newest)
  local at = now - req.age
  if at > now - period and req.consumed > 0 then
    local add = math.min(req.consumed, limit - n)
    if add > 0 then
      newest = append_log(newest, at, add)
      n = n + add
    end
  end
  -- core_debt.go's slidingLog.settle.
  if req.settled > 0 then
    local add = math.min(req.settled, limit + req.max_debt - n)
    if add > 0 then
      newest = append_log(newest, now, add)
      n = n + add
    end
  end
  if newest ~= nil then
    redis.call('PEXPIRE', key, fmt(math.max(1, math.ceil((newest.at + period - now) / 1000))))
  end
  return { 0, limit - n, ttl, 0, 0, 0, '0' }
end

return dispatch(acquire, nil, check)
