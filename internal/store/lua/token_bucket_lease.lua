-- token_bucket_lease.lua: acquireBucket (core_bucket.go), release and report
-- of core.go, the lease part of token buckets (redis.go appends it, after
-- lease.lua, to token_bucket.lua).

-- reserved_rates is core_absence.go's reservedRates: the reservations of
-- the holders absent or back at now, tokens per second.
local function reserved_rates(st, now)
  local rates
  for _, h in pairs(st.holders) do
    if h[1] + absence > now and (h[13] or h[1] <= now) then
      rates = rates or {}
      rates[#rates + 1] = per_second / share_n(h)
    end
  end
  return sorted_sum(rates)
end

-- cover is core_absence.go's cover: what node, back from an absence or at
-- its next request since, had reserved for its fallback since its
-- reservation started.
local function cover(st, node, now)
  local h = st.holders[node]
  if h == nil or h[1] + absence <= now or not (h[13] or h[1] <= now) then
    return 0
  end
  return per_second / share_n(h) * max(now - (h[13] or h[1]), 0) / 1e6
end

-- lend_rate is core_holders.go's lendRate: node's share of the rule's rate.
local function lend_rate(st, node, now)
  local self = st.holders[node]
  if self[3] <= 0 then
    return 0
  end
  local avail = per_second - reserved_rates(st, now)
  if st.t < 0 then
    avail = 0
  end
  local wants, held = {}, {}
  for n, h in pairs(st.holders) do
    if h[1] > now then
      wants[#wants + 1] = h[3]
      if n ~= node then
        held[#held + 1] = h[4]
      end
    end
  end
  local share = min(self[3], water_level(avail, wants))
  share = max(min(share, avail - sorted_sum(held)), 0)
  self[4] = share
  return share
end

-- debit is core_bucket.go's bucket.debit: in full, a debt never forgiven.
local function debit(st, consumed)
  st.t = st.t - consumed
end

-- settle is core_debt.go's bucket.settle: settled tokens taken, the bucket
-- going at most the rule's debt below empty.
local function settle(st, settled)
  if settled <= 0 then
    return
  end
  st.t = st.t - min(settled, max(st.t + req.max_debt, 0))
end

-- report is core.go's report for a strict token bucket.
local function report(now, req)
  local st = load(now, true) or fresh(now)
  local consumed = cap_consumed(st, capacity, req.node, now, req.consumed, req.age)
  refill(st, now)
  debit(st, consumed)
  settle(st, req.settled)
  st.x = expiry(st, now)
  save(st, now)
  return { 0, floor(max(st.t, 0)), ttl, 0, 0, 0, '0' }
end

-- fullness is core_bucket.go's bucket.fullness.
local function fullness(st, full)
  if full >= ttl then
    st.p = 1
  elseif st.p > 0 and st.p - 1 >= ttl then
    st.p = 0
  end
  local full_in_ttl = full
  if st.p > 0 then
    full_in_ttl = max(full_in_ttl, ttl - (st.p - 1))
  end
  return min(full, ttl), min(full_in_ttl, ttl)
end

local function acquire(now, req)
  if req.strict then
    return report(now, req)
  end
  local st = load(now, true) or fresh(now)
  local again = replay(st, now, req, nil)
  if again then
    return again
  end
  local credited, held = give_back(st, req.node, now, 0, req.returned, req.held)
  local full_for, full_in_ttl = fullness(st, refill(st, now, req.node, held, req.held_for))
  st.t = min(ceiling(st, now, req.node, held), st.t + credited)
  local covered = cover(st, req.node, now)
  local prev = st.holders[req.node]
  debit(st, max(cap_consumed(st, capacity, req.node, now, req.consumed, req.age) - covered, 0))
  settle(st, req.settled)
  local others, holders, told = hold(st, req.node, req.want, req.want_rate, now, held, 0)
  local g = fair_grant(floor(max(st.t, 0)), req.want, others)
  st.t = st.t - g
  lent(st, req.node, g)
  local share = lend_rate(st, req.node, now)
  mark_back(st, req, prev, now, 0, 0, false)
  remember(st, req, g)
  local remaining = floor(max(st.t, 0))
  local retry = 0
  if g < req.want then
    local need = min(req.want - g, capacity)
    if st.t < need then
      retry = refill_wait(st, now, need - st.t)
    end
  end
  st.x = expiry(st, now)
  save(st, now)
  return { g, remaining, ttl, retry, holders, 0, rate_reply(share), full_for, full_in_ttl, told }
end

-- A missing state is a full bucket: a return to it changes nothing, so
-- nothing is written.
local function release(now, node, tokens, _, held)
  local st = load(now, true)
  if not st then
    return {}
  end
  local credited = give_back(st, node, now, 0, tokens, held)
  refill(st, now)
  forget(st, node)
  st.t = min(ceiling(st, now), st.t + credited)
  save(st, now)
  return {}
end

return dispatch(acquire, release, check, setup)
