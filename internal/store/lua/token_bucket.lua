-- token_bucket.lua: checkBucket of core_bucket.go and what token buckets'
-- checks and leases share (token_bucket_lease.lua holds the rest). State (see
-- common.lua): t (tokens, may be negative: bounded debt), s (µs of the last
-- refill), x (expiry), the holders, and p, core_bucket.go's belowFor (0:
-- none). Every operation reads the holders: a refill needs their shares.

-- The item's capacity, rate per µs and per second (see setup).
local capacity, rate, per_second

local function setup()
  capacity = burst
  rate = limit / period
  per_second = limit * 1e6 / period
end

-- fresh is core.go's newState: full for two TTLs.
local function fresh(now)
  return { t = capacity, p = 0, s = now - 2 * ttl, holders = {} }
end

-- withheld_rate is core_bucket.go's withheldRate: the shares and the
-- reservations (r/n each) of the holders absent or back at now, tokens per
-- second.
local function withheld_rate(st, now)
  local rates
  for _, h in pairs(st.holders) do
    if h[4] > 0 and h[1] > now then
      rates = rates or {}
      rates[#rates + 1] = h[4]
    end
    if h[1] + absence > now and (h[13] or h[1] <= now) then
      rates = rates or {}
      rates[#rates + 1] = per_second / share_n(h)
    end
  end
  return sorted_sum(rates)
end

-- ceiling is core_bucket.go's ceiling: the burst, less what the present
-- holders may still hold of what the bucket lent them, node's counted as
-- own (when node is given), in whole tokens.
local function ceiling(st, now, node, own)
  local held = { floor(own or 0) }
  for n, h in pairs(st.holders) do
    if n ~= node and h[1] > now and h[7] >= 1 then
      held[#held + 1] = floor(h[7])
    end
  end
  return max(capacity - sorted_sum(held), 0)
end

-- earned is core_bucket.go's earned: what the bucket earns over [from, to],
-- from at or after its stamp: the rule's rate less the shares lent and the
-- reservations held over it.
local function earned(st, from, to)
  local lent
  for _, h in pairs(st.holders) do
    local stop = min(h[1], to)
    if h[4] > 0 and stop > from then
      lent = lent or {}
      lent[#lent + 1] = h[4] * (stop - from) / 1e6
    end
  end
  for _, h in pairs(st.holders) do
    local since, till = max(h[13] or h[1], from), min(to, h[1] + absence)
    if till > since then
      lent = lent or {}
      lent[#lent + 1] = per_second / share_n(h) * (till - since) / 1e6
    end
  end
  return (to - from) * rate - sorted_sum(lent)
end

-- refill adds what the bucket earned since the last refill: the rule's rate,
-- less the shares lent to holders, each until its lease ended, and less the
-- reservations of the holders absent or back, each from when its lease
-- ended, or it came back, until its absence did. A clock that steps back
-- earns nothing and does not move the stamp back. It returns how long the
-- bucket has been full (core_bucket.go's refill; with node, its
-- refillAround: own is what node says it holds, held_for how long ago it
-- first spent since its last request, -1 or nil when it did not say).
local function refill(st, now, node, own, held_for)
  if now <= st.s then
    return 0
  end
  local sum = st.t + max(earned(st, st.s, now), 0)
  st.t = min(ceiling(st, now, node, own), sum)
  local self = node and st.holders[node]
  if self and held_for and held_for >= 0 and self[1] > now and self[7] > own then
    local from = max(now - held_for, st.s)
    st.t = min(st.t, ceiling(st, now, node, self[7]) + max(earned(st, from, now), 0))
  end
  local full = 0
  local over = sum - capacity
  if over > 0 then
    full = now - st.s
    local free = rate - withheld_rate(st, now) / 1e6
    if free > 0 then
      full = min(floor(over / free), full)
    end
  end
  if st.p > 0 then
    st.p = st.p + (now - st.s - full)
  end
  st.s = now
  return full
end

-- refill_wait is core_bucket.go's refillWait: how long until the bucket earns
-- need tokens at the part of the rate no share holds.
local function refill_wait(st, now, need)
  if need <= 0 then
    return 0
  end
  local wait = ttl + need / rate
  local free = rate - withheld_rate(st, now) / 1e6
  if free > 0 then
    wait = min(wait, need / free)
  end
  return ceil_us(wait)
end

-- expiry is core_bucket.go's bucketExpiry: when the state is full again at
-- the latest, its holders' absences over.
local function expiry(st, now)
  return max(now, kept_until(st)) + ceil_us((capacity - st.t) / rate) + ttl
end

local function check(now, cost)
  local st = load(now, true) or fresh(now)
  refill(st, now)
  local allowed, retry = 0, 0
  if st.t >= cost then
    st.t = st.t - cost
    allowed = 1
  else
    retry = refill_wait(st, now, cost - st.t)
  end
  local remaining = floor(max(st.t, 0))
  local reset = refill_wait(st, now, capacity - st.t)
  st.x = expiry(st, now)
  save(st, now)
  return { allowed, remaining, retry, reset }
end

-- A call of checks ends here. A call of leases goes on with lease.lua and
-- token_bucket_lease.lua, which redis.go appends.
if ARGV[1] == 'c' then
  return dispatch(nil, nil, check, setup)
end
