-- common.lua is the prelude of every Allot script (Go prepends it to each
-- algorithm's file): the helpers of internal/store/core.go, ported line by
-- line so that the memory and Redis stores reach the same numbers.
--
-- Lua 5.1 numbers are doubles, as are core.go's token counts; every integer
-- here stays below 2^53, so it is exact. Stored numbers are written with
-- '%.17g' (never tostring, which keeps only 14 digits) so they read back bit
-- for bit, and every number returned is already whole: Redis truncates Lua
-- numbers to integers on the way out.
--
-- A call runs one item per key of KEYS, in order, at one instant, and
-- answers an array of the items' replies. (A batch of keys is one call on
-- a single Redis; on Redis Cluster a call holds one key: one hash slot.)
-- ARGV holds the items' arguments one after the other, each preceded by
-- their count: op ('a' acquire, 'r' release, 'c' check), limit, period
-- (µs), burst, lease ttl (µs), then the operation's own arguments: for an
-- acquire node, want, consumed, the consumption's age (µs), the wanted
-- rate (tokens/s), returned tokens and their epoch, the request's
-- sequence number (0: none) and '1' when the rule is strict (the request
-- only reports consumption); for a release node, tokens and epoch; for a
-- check the cost.

-- The item being run: its key and rule, and arg(i), its i-th argument.
local key, op, limit, period, burst, ttl
local base = 0
local function arg(i)
  return ARGV[base + i]
end

-- Must equal maxWaitUS in core.go.
local max_wait = 2 ^ 50

local function fmt(x)
  return string.format('%.17g', x)
end

-- The store's clock is Redis' own: callers' clocks never enter a decision.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function ceil_us(x)
  return math.min(math.ceil(x), max_wait)
end

-- Large argument lists go out in slices: Lua's unpack has a stack limit.
local function call_chunked(cmd, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- parse_holder reads a holder field's value: "<until µs>:<want>", then, as
-- far as they are not zero, ":<wanted rate>:<lent rate>" (tokens/s),
-- ":<seq>:<granted>", and ":<held>:<epoch>" (what it may give back, lent
-- in window epoch).
local function parse_holder(v)
  local h, i = {}, 1
  for part in string.gmatch(v, '[^:]+') do
    h[i] = tonumber(part)
    i = i + 1
  end
  for j = 3, 8 do
    h[j] = h[j] or 0
  end
  return h
end

-- load reads a hash state: scalar fields t (tokens or count), p (previous
-- window), s (stamp or window index), x (expiry, µs), a (the rate lent to
-- holders when it was saved, tokens/s), and the holder fields "h:<node>"
-- (parse_holder). An acquire always reads the holders; a check or a release
-- reads them only when some of the rate was lent (a token bucket's refill
-- needs their shares), so that otherwise its cost does not grow with them.
-- A missing or expired state is nil; an expired key is deleted so that none
-- of its holders leak into the new state (memory.go replaces the whole state
-- the same way).
local function load(now, with_holders)
  local st = { holders = {} }
  if not with_holders then
    local v = redis.call('HMGET', key, 't', 'p', 's', 'x', 'a')
    st.t, st.p, st.s, st.x = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
    with_holders = (tonumber(v[5]) or 0) > 0
  end
  if with_holders then
    local raw = redis.call('HGETALL', key)
    for i = 1, #raw, 2 do
      local f, v = raw[i], raw[i + 1]
      if string.sub(f, 1, 2) == 'h:' then
        st.holders[string.sub(f, 3)] = parse_holder(v)
      elseif f == 't' or f == 'p' or f == 's' or f == 'x' then
        st[f] = tonumber(v)
      end
    end
  end
  if st.x == nil or st.x <= now then
    if st.t ~= nil or st.x ~= nil or next(st.holders) ~= nil then
      redis.call('DEL', key)
    end
    return nil
  end
  st.p = st.p or 0
  return st
end

-- sorted_sum adds xs in ascending order, as core.go's sortedSum does, so
-- that both reach the same float whatever order the holders come in.
local function sorted_sum(xs)
  table.sort(xs)
  local sum = 0
  for i = 1, #xs do
    sum = sum + xs[i]
  end
  return sum
end

-- lent_rate is the sum of the shares active at now, tokens per second.
local function lent_rate(st, now)
  local rates = {}
  for _, h in pairs(st.holders) do
    if h[4] > 0 and h[1] > now then
      rates[#rates + 1] = h[4]
    end
  end
  return sorted_sum(rates)
end

-- water_level is core.go's waterLevel: the level at which the wants, each
-- capped at it, sum to avail; math.huge when they all fit.
local function water_level(avail, wants)
  table.sort(wants)
  local rem, n = avail, #wants
  for i = 1, #wants do
    local share = rem / n
    if wants[i] > share then
      return share
    end
    rem = rem - wants[i]
    n = n - 1
  end
  return math.huge
end

-- hold records node as a holder wanting want tokens and want_rate tokens
-- per second until now+ttl, forgets expired holders, and returns the wants
-- of the other active holders and the count. Its share is lend_rate's.
local function hold(st, node, want, want_rate, now, held, epoch)
  local others, count, dead = {}, 1, {}
  for n, h in pairs(st.holders) do
    if h[1] <= now then
      dead[#dead + 1] = 'h:' .. n
      st.holders[n] = nil
    elseif n ~= node then
      others[#others + 1] = h[2]
      count = count + 1
    end
  end
  if #dead > 0 then
    call_chunked('HDEL', dead)
  end
  st.holders[node] = { now + ttl, want, want_rate, 0, 0, 0, held, epoch }
  st.held = node
  return others, count
end

-- givable is core.go's givable: what node may give back at now of what it
-- was lent in window epoch.
local function givable(st, node, now, epoch)
  local h = st.holders[node]
  if h == nil or h[1] <= now or h[8] ~= epoch then
    return 0
  end
  return h[7] + h[4] * math.max(math.min(now, h[1]) - (h[1] - ttl), 0) / 1e6
end

-- give_back is core.go's giveBack: the tokens credited, and what node may
-- still give back.
local function give_back(st, node, now, epoch, tokens)
  local can = givable(st, node, now, epoch)
  local credited = math.min(tokens, math.floor(can))
  return credited, can - credited
end

-- cap_consumed is core.go's capConsumed, capacity being the rule's.
local function cap_consumed(st, capacity, node, now, consumed, age)
  if consumed <= 0 then
    return 0
  end
  local n = 1
  for h, o in pairs(st.holders) do
    if h ~= node and o[1] > now then
      n = n + 1
    end
  end
  local cap = capacity / n + age * (limit / period) / n
  return math.min(consumed, math.ceil(math.min(cap, max_wait)))
end

-- lent is core.go's lent: a grant adds to what the holder may give back.
local function lent(st, node, g)
  local h = st.holders[node]
  h[7] = h[7] + g
end

-- remember records what the holder's request was granted, under its
-- sequence number, for replay.
local function remember(st, req, granted)
  if req.seq > 0 then
    local h = st.holders[req.node]
    h[5], h[6] = req.seq, granted
  end
end

-- replay is core.go's replay: the node's last request, whose answer was
-- lost, answered again without being applied again. window is nil for a
-- token bucket, else 'fixed' or 'sliding'.
local function replay(st, now, req, window)
  local h = st.holders[req.node]
  if req.seq == 0 or h == nil or h[5] ~= req.seq or h[1] <= now then
    return nil
  end
  local count = 0
  for _, o in pairs(st.holders) do
    if o[1] > now then
      count = count + 1
    end
  end
  local applied = h[1] - ttl
  local lease_ttl, epoch, remaining = ttl, 0, 0
  if window == nil then
    remaining = math.floor(math.max(st.t, 0))
  else
    epoch = (applied - math.fmod(applied, period)) / period
    remaining = math.floor(math.max(limit - st.t, 0))
    if window == 'fixed' then
      lease_ttl = math.max(math.min(ttl, (epoch + 1) * period - applied), 0)
    end
  end
  return { h[6], remaining, lease_ttl, 0, count, epoch, fmt(h[4]) }
end

-- fair_grant is core.go's fairGrant: water-filling over the holders' wants.
local function fair_grant(avail, want, others)
  if want <= 0 or avail <= 0 then
    return 0
  end
  local total = want
  for i = 1, #others do
    total = total + others[i]
  end
  if total <= avail then
    return want
  end
  local wants = { want }
  for i = 1, #others do
    wants[i + 1] = others[i]
  end
  local level = water_level(avail, wants)
  local g = math.min(want, math.floor(math.min(level, want)))
  if g < 1 then
    g = 1
  end
  return g
end

-- save writes the given fields, the expiry, the rate lent to holders and
-- the holder recorded by hold if any, and sets the key's TTL in the same
-- call: no key is ever left without one. The TTL is rounded up to whole
-- milliseconds, so Redis never forgets a state before core.go would; the
-- stored x decides the exact instant.
local function save(st, now, fields)
  fields[#fields + 1] = 'x'
  fields[#fields + 1] = fmt(st.x)
  fields[#fields + 1] = 'a'
  fields[#fields + 1] = fmt(lent_rate(st, now))
  if st.held then
    local h = st.holders[st.held]
    fields[#fields + 1] = 'h:' .. st.held
    local v = fmt(h[1]) .. ':' .. fmt(h[2])
    local held = h[7] ~= 0 or h[8] ~= 0
    if h[3] > 0 or h[5] > 0 or held then
      v = v .. ':' .. fmt(h[3]) .. ':' .. fmt(h[4])
    end
    if h[5] > 0 or held then
      v = v .. ':' .. fmt(h[5]) .. ':' .. fmt(h[6])
    end
    if held then
      v = v .. ':' .. fmt(h[7]) .. ':' .. fmt(h[8])
    end
    fields[#fields + 1] = v
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, fmt(math.max(1, math.ceil((st.x - now) / 1000))))
end

-- forget drops node as a holder (a release).
local function forget(st, node)
  st.holders[node] = nil
  redis.call('HDEL', key, 'h:' .. node)
end

-- debit_window is core.go's debitWindow, on a rolled window state.
local function debit_window(st, consumed, age)
  local ceiling = 2 * limit
  if age >= period then
    ceiling = math.max(st.t, limit)
  end
  st.t = math.min(st.t + consumed, ceiling)
end

-- run_item runs the current item.
local function run_item(now, acquire, release, check)
  if op == 'a' and acquire then
    return acquire(now, {
      node = arg(6),
      want = tonumber(arg(7)),
      consumed = tonumber(arg(8)),
      age = tonumber(arg(9)),
      want_rate = tonumber(arg(10)),
      returned = tonumber(arg(11)),
      returned_epoch = tonumber(arg(12)),
      seq = tonumber(arg(13)),
      strict = arg(14) == '1',
    })
  elseif op == 'r' and release then
    return release(now, arg(6), tonumber(arg(7)), tonumber(arg(8)))
  elseif op == 'c' then
    return check(now, tonumber(arg(6)))
  end
  return nil
end

-- dispatch runs every item of the call; setup, if any, derives what the
-- algorithm needs from the item's rule.
local function dispatch(acquire, release, check, setup)
  local now = now_us()
  local replies, at = {}, 1
  for i = 1, #KEYS do
    base = at
    key, op = KEYS[i], arg(1)
    limit, period, burst, ttl = tonumber(arg(2)), tonumber(arg(3)), tonumber(arg(4)), tonumber(arg(5))
    if setup then
      setup()
    end
    local reply = run_item(now, acquire, release, check)
    if reply == nil then
      return redis.error_reply('ERR allot: unsupported operation ' .. tostring(op))
    end
    replies[i] = reply
    at = at + tonumber(ARGV[at]) + 1
  end
  return replies
end
