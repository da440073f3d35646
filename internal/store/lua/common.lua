-- common.lua is the prelude of every Allot script (Go prepends it to each
-- algorithm's file): the helpers of internal/store/core.go, ported line by
-- line so that the memory and Redis stores reach the same numbers.
-- Lua 5.1 numbers are doubles, as are core.go's token counts; every integer
-- here stays below 2^53, so it is exact. Every number returned is already
-- whole (Redis truncates Lua numbers to integers on the way out), but for a
-- lent rate, which goes out as a string written with '%.17g' (tostring keeps
-- only 14 digits).
-- A call runs one operation, ARGV[1] ('a' acquire, 'r' release, 'c'
-- check), on each key of KEYS, in order, at one instant, and answers an
-- array of the items' replies. (A batch of keys is one call on a single
-- Redis; on Redis Cluster a call holds one key: one hash slot.) ARGV[i+1]
-- holds the arguments of the item of KEYS[i], as MessagePack values one
-- after the other: limit, period (µs; for a calendar rule an array, see
-- calendar_window), burst, lease ttl (µs), then the
-- operation's own: for an acquire node, want, consumed, the consumption's
-- age (µs), the wanted rate (tokens/s), returned tokens and their epoch,
-- the request's sequence number (0: none), 1 when the rule is strict
-- (the request only reports consumption), else 0, and the tokens the node
-- holds unspent (-1: it did not say); for a release node, tokens, epoch and
-- the tokens held (-1 likewise); for a check the cost.
-- What a script costs Redis is mostly what it allocates and converts: each
-- table, string and closure it makes, each C function it calls (tonumber,
-- string.format, redis.call) takes from tens of nanoseconds to a
-- microsecond, and a script makes its closures anew on every call. Hence
-- the shapes below: library functions are locals; an item's arguments are
-- one string that cmsgpack reads in one call; a state is read and written
-- as MessagePack (one C call each way, no number parsed or printed as
-- text) with one GET and one SET; and a call of checks stops before the
-- helpers that only leases use are made (lease.lua).
-- A state of a token bucket or a window is one Redis string of MessagePack
-- values, one after the other: t (tokens, or the current window's count), p
-- (the previous window's count, or a bucket's belowFor, see core_bucket.go:
-- 0 in the states of versions before it), s (the refill stamp, µs, or the
-- window index) and x - s (x is the expiry, µs: a token bucket's follows s,
-- and the difference takes 5 bytes where x takes 9); then ten per holder:
-- node, until (µs), want, wanted rate, lent rate (nil when it is the wanted
-- rate, as it mostly is), seq, granted, held, epoch and n, the holder count
-- its last lease told it (core.go's holder). A holder back from an absence
-- (core_absence.go) has a back record right after its own: ten values
-- again, node being "\255" and the holder's node, then 0 (until), back
-- (µs), 0, nil, back_n, back_used, 0, 0 and 1. A version before it reads
-- the record as a holder whose absence ended long ago, which its refills,
-- counts and reservations pass over and its next lease forgets, and keeps
-- the record's bytes otherwise: it sees no return, as it knew none. No
-- node is named so (node ids are UTF-8, and 255 begins no UTF-8 string), a
-- back record that does not follow its holder's (one that version released)
-- is dropped, and a holder without one reads back as none, so the tags
-- stay: both versions read each other's states.
-- cmsgpack writes a number as an integer when it is one, else as a float32
-- when that is exact, else as a float64, so every number reads back bit for
-- bit (but -0, which reads back as 0 and which no decision tells apart). A
-- holder that a call does not change is written back as the bytes it was read
-- from.

local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local fmod, sort, sub, byte = math.fmod, table.sort, string.sub, string.byte
local pack, unpack_all = cmsgpack.pack, cmsgpack.unpack
local unpack_n, call = cmsgpack.unpack_limit, redis.call

-- The item being run: its key and rule, and the rule's absence (µs:
-- core.go's absenceUS, set by dispatch). bounds is nil but for a calendar
-- rule (rules.Calendar): { nominal period, then four window boundaries, µs
-- }, computed in Go around the allocator's clock (redis.go's ruleArgs);
-- period is then the nominal period, which rates use.
local key, limit, period, burst, ttl, absence, bounds

-- Must equal maxWaitUS in core.go.
local max_wait = 2 ^ 50

-- Redis keeps a state until its expiry x rounded up to a multiple of
-- ttl_step (µs), so that the saves of a busy key mostly keep its TTL as it
-- is (SET with KEEPTTL) instead of setting it anew, which costs Redis more
-- than the rest of the SET. Redis forgets a state at most this long after
-- core.go would, never before. The step is part of the layout: a version
-- that changes it takes a new key tag (redis.go), as it would keep TTLs set
-- to another step.
local ttl_step = 100000

local function fmt(x)
  return string.format('%.17g', x)
end

local function ceil_us(x)
  return min(ceil(x), max_wait)
end

-- Large argument lists go out in slices: Lua's unpack has a stack limit.
local function call_chunked(cmd, list)
  for i = 1, #list, 1000 do
    call(cmd, key, unpack(list, i, min(i + 999, #list)))
  end
end

-- load reads the state of key: nil when it is missing or expired (the
-- stored x decides, as in core.go, not Redis' TTL, which may reach up to
-- ttl_step further). With with_holders, st.holders maps each holder's
-- node to { until, want, wanted rate, lent rate, seq, granted, held, epoch,
-- n, node, first byte, end byte, back, back_n, back_used } (the last three
-- nil when it is not back; its end byte is its back record's) and st.list
-- holds them in stored order; without, the bytes after the scalars are
-- kept whole in st.tail, to be written back as they are.
local function load(now, with_holders)
  local v = call('GET', key)
  if not v then
    return nil
  end
  local at, t, p, s, x = unpack_n(v, 4, 0)
  x = s + x
  if x <= now then
    return nil
  end
  local st = { t = t, p = p, s = s, x = x, holders = {} }
  st.ttl_ends = ceil(x / ttl_step) * ttl_step -- what the key's TTL reaches
  if not with_holders then
    st.tail = at < 0 and '' or sub(v, at + 1)
    return st
  end
  local list, n = nil, 0
  while at >= 0 do
    local from = at
    local node, u, w, wr, r, sq, g, hd, ep, hn
    at, node, u, w, wr, r, sq, g, hd, ep, hn = unpack_n(v, 10, at)
    local stop = at < 0 and #v or at
    if byte(node, 1) == 255 then
      -- A back record: its holder's, read just before it.
      local h = list and list[n]
      if h and h[12] == from and h[10] == sub(node, 2) then
        h[12], h[13], h[14], h[15] = stop, w, sq, g
      end
    else
      if r == nil then
        r = wr
      end
      local h = { u, w, wr, r, sq, g, hd, ep, hn, node, from, stop }
      n = n + 1
      list = list or {}
      list[n] = h
      st.holders[node] = h
    end
  end
  st.list, st.raw = list, v
  return st
end

-- save writes the state and its holders: the one hold recorded, then
-- those read and kept unchanged, as the bytes they were read from (a run of
-- them in one piece). The SET sets or keeps the key's TTL in the same
-- command, so that no key is ever left without one: the TTL reaches x
-- rounded up to ttl_step, and a key whose TTL reaches that instant already
-- keeps it.
local function save(st, now)
  local v
  if st.held then
    local h = st.holders[st.held]
    local r = h[4]
    if r == h[3] then
      r = nil
    end
    v = pack(st.t, st.p, st.s, st.x - st.s,
      st.held, h[1], h[2], h[3], r, h[5], h[6], h[7], h[8], h[9])
    if h[13] then
      v = v .. pack('\255' .. st.held, 0, h[13], 0, nil, h[14], h[15], 0, 0, 1)
    end
  else
    v = pack(st.t, st.p, st.s, st.x - st.s)
  end
  if st.tail then
    v = v .. st.tail
  elseif st.list then
    local list, raw, from, to = st.list, st.raw, -1, -1
    for i = 1, #list do
      local h = list[i]
      if st.holders[h[10]] == h then
        if h[11] ~= to then
          if from >= 0 then
            v = v .. sub(raw, from + 1, to)
          end
          from = h[11]
        end
        to = h[12]
      end
    end
    if from >= 0 then
      v = v .. sub(raw, from + 1, to)
    end
  end
  local ends = ceil(st.x / ttl_step) * ttl_step
  if ends == st.ttl_ends then
    call('SET', key, v, 'KEEPTTL')
  else
    -- In whole milliseconds, rounded up: Redis keeps the key through every
    -- instant before ends.
    call('SET', key, v, 'PX', max(1, ceil((ends - now) / 1000)))
  end
end

-- calendar_window is the calendar window holding now among bounds: its
-- start and end (µs). dispatch has checked that one holds it.
local function calendar_window(now)
  for i = 3, #bounds - 1 do
    if now < bounds[i] then
      return bounds[i - 1], bounds[i]
    end
  end
  return bounds[#bounds - 1], bounds[#bounds]
end

-- outside_calendar reports whether a calendar item's boundaries miss the
-- store's clock: it and the allocator's are more than a period apart.
local function outside_calendar(args, now)
  local _, _, p = unpack_n(args, 2, 0)
  return type(p) == 'table' and not (now >= p[2] and now < p[#p])
end

-- sorted_sum adds xs in ascending order, as core.go's sortedSum does, so
-- that both reach the same float whatever order the holders come in. No xs
-- (nil: a list never started, to spare a table) sum to 0.
local function sorted_sum(xs)
  if not xs then
    return 0
  end
  if #xs > 1 then
    sort(xs)
  end
  local sum = 0
  for i = 1, #xs do
    sum = sum + xs[i]
  end
  return sum
end

-- share_n is core_absence.go's holder.shareN: what the holder's fallback
-- divides by, the smaller of its two counts while it is back.
local function share_n(h)
  if h[13] then
    return min(h[9], h[14])
  end
  return h[9]
end

-- window_reserved is core_absence.go's holder.windowReserved: what the
-- window starting at start keeps back at now for h, l/n if its lease ended
-- by the window's start, or what is left of its l/n if it is back in it.
local function window_reserved(h, now, start)
  if h == nil or h[1] + absence <= now then
    return 0
  end
  local share = limit / share_n(h)
  if min(h[1], (h[8] + 1) * period) <= start then
    return share
  elseif h[13] and h[8] == start / period then
    return max(share - h[15], 0)
  end
  return 0
end

-- window_reserve is core_absence.go's windowReserve: window_reserved summed
-- over the holders.
local function window_reserve(st, now, start)
  local xs
  for _, h in pairs(st.holders) do
    local x = window_reserved(h, now, start)
    if x > 0 then
      xs = xs or {}
      xs[#xs + 1] = x
    end
  end
  return sorted_sum(xs)
end

-- kept_until is core_absence.go's keptUntil: when the last holder's absence
-- ends, 0 without holders.
local function kept_until(st)
  local x = 0
  for _, h in pairs(st.holders) do
    x = max(x, h[1] + absence)
  end
  return x
end

-- The acquire being run; one table serves every item of a call.
local req = {}

-- dispatch runs the call's operation on every item; setup, if any, derives
-- what the algorithm needs from the item's rule.
-- store_now is the store's clock, Redis' own, in µs: callers' clocks never
-- enter a decision. Every script reads it once a call, here.
local function store_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function dispatch(acquire, release, check, setup)
  local now = store_now()
  local op, replies = ARGV[1], {}
  if not (op == 'a' and acquire or op == 'r' and release or op == 'c' and check) then
    return redis.error_reply('ERR allot: unsupported operation ' .. tostring(op))
  end
  -- A batch holding calendar items ends with a mark (redis.go): their
  -- windows must hold the clock, all of them before any item runs, so that
  -- a refusal applies nothing.
  local calendar = #ARGV > #KEYS + 1
  if calendar then
    for i = 1, #KEYS do
      if outside_calendar(ARGV[i + 1], now) then
        return redis.error_reply('ERR allot: calendar: store clock outside the windows sent (' .. fmt(now) .. ' µs)')
      end
    end
  end
  for i = 1, #KEYS do
    key = KEYS[i]
    local a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15
    limit, period, burst, ttl, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 =
      unpack_all(ARGV[i + 1])
    bounds = nil
    if calendar and type(period) == 'table' then
      bounds, period = period, period[1]
    end
    absence = max(60000000, 30 * ttl)
    if setup then
      setup()
    end
    if op == 'a' then
      req.node, req.want, req.consumed, req.age, req.want_rate = a1, a2, a3, a4, a5
      req.returned, req.returned_epoch, req.seq, req.strict = a6, a7, a8, a9 == 1
      req.held, req.fallback_nodes, req.on_fallback = a10, a11, a12 == 1
      req.settled, req.max_debt, req.held_for = a13, a14, a15
      replies[i] = acquire(now, req)
    elseif op == 'r' then
      replies[i] = release(now, a1, a2, a3, a4)
    else
      replies[i] = check(now, a1)
    end
  end
  return replies
end
