-- concurrency.lua: core_concurrency.go, line by line. A concurrency key's
-- state is one Redis string of MessagePack values: x (the expiry, µs), then
-- six per holder: node, held, want, until (µs), since (µs) and seq. Every number
-- is a whole number below 2^53. The key's TTL reaches x, set in the same
-- SET. The script has its own dispatch (common.lua's reads token items):
-- an acquire item's arguments are limit, period, burst and ttl (µs), as
-- every item's, then node, want, kept, the rule's lease max and seq; a release
-- item's node; concurrency rules have no checks.

local function slot_load(now)
  local v = call('GET', key)
  local st = { holders = {} }
  if not v then
    return st
  end
  local t = { unpack_all(v) }
  if t[1] <= now then
    return st
  end
  for i = 2, #t, 6 do
    local h = { held = t[i + 1], want = t[i + 2], ['until'] = t[i + 3], since = t[i + 4], seq = t[i + 5] }
    if h['until'] > now then -- dropEnded
      st.holders[t[i]] = h
    end
  end
  return st
end

-- slot_save writes the holders back, or deletes the key without any.
local function slot_save(st, now)
  local x, parts = now, {}
  for node, h in pairs(st.holders) do
    x = max(x, h['until'])
    parts[#parts + 1] = pack(node, h.held, h.want, h['until'], h.since, h.seq)
  end
  if x <= now then
    call('DEL', key)
    return
  end
  call('SET', key, pack(x) .. table.concat(parts), 'PX', max(1, ceil((x - now) / 1000)))
end

-- slot_first is core_concurrency.go's slotFirst, as a less-than.
local function slot_first(a, b)
  if a.h.since ~= b.h.since then
    return a.h.since < b.h.since
  end
  return a.node < b.node
end

-- slot_share is slotState.share.
local function slot_share(st, node, me)
  local cs = { { node = node, h = me } }
  for n, h in pairs(st.holders) do
    if n ~= node and h.want > 0 then
      cs[#cs + 1] = { node = n, h = h }
    end
  end
  sort(cs, function(a, b) return a.h.want < b.h.want end)
  local left, i = limit, 1
  while i <= #cs do
    if cs[i].h.want * (#cs - i + 1) > left then
      break
    end
    if cs[i].node == node then
      return me.want
    end
    left = left - cs[i].h.want
    i = i + 1
  end
  local rest = {}
  for j = i, #cs do
    rest[#rest + 1] = cs[j]
  end
  local level = floor(left / #rest)
  local extra = left - level * #rest
  sort(rest, slot_first)
  for j = 1, #rest do
    if rest[j].node == node then
      if j - 1 < extra then
        return level + 1
      end
      return level
    end
  end
  return level
end

-- slot_others is what the holders other than node hold.
local function slot_others(st, node)
  local others = 0
  for n, o in pairs(st.holders) do
    if n ~= node then
      others = others + o.held
    end
  end
  return others
end

-- slot_unapplied is slotState.unapplied.
local function slot_unapplied(st, now, node, h, seq)
  local granted, holders = 0, 0
  if seq == h.seq then
    granted = h.held
  end
  for _ in pairs(st.holders) do
    holders = holders + 1
  end
  local others = slot_others(st, node)
  local share = slot_share(st, node, h)
  slot_save(st, now)
  return { granted, max(limit - others - h.held, 0), ttl, holders, share }
end

local function slot_acquire(now, node, want, kept, lease_max, seq)
  local st = slot_load(now)
  local h = st.holders[node]
  if h and seq > 0 and seq <= h.seq then
    return slot_unapplied(st, now, node, h, seq)
  end
  if not h then
    h = { held = 0, want = 0, ['until'] = 0, since = now, seq = 0 }
  end
  kept = min(max(kept, 0), h.held)
  want = min(max(want, kept), lease_max)
  local others, holders = slot_others(st, node), 0
  h.want = want
  local share = slot_share(st, node, h)
  h.held = max(kept, min(want, limit - others, share))
  h['until'] = now + ttl
  h.seq = max(seq, 0)
  if h.held == 0 and want == 0 then
    st.holders[node] = nil
  else
    st.holders[node] = h
  end
  for _ in pairs(st.holders) do
    holders = holders + 1
  end
  slot_save(st, now)
  return { h.held, limit - others - h.held, ttl, max(holders, 1), share }
end

local function slot_release(now, node)
  local st = slot_load(now)
  st.holders[node] = nil
  slot_save(st, now)
  return {}
end

local now = store_now()
local op, replies = ARGV[1], {}
if op ~= 'a' and op ~= 'r' then
  return redis.error_reply('ERR allot: unsupported operation on a concurrency rule ' .. tostring(op))
end
for i = 1, #KEYS do
  key = KEYS[i]
  local node, a2, a3, a4, a5
  limit, period, burst, ttl, node, a2, a3, a4, a5 = unpack_all(ARGV[i + 1])
  if op == 'a' then
    replies[i] = slot_acquire(now, node, a2, a3, a4, a5)
  else
    replies[i] = slot_release(now, node)
  end
end
return replies
