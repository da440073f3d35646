-- lease.lua: the helpers of core.go that only leases (acquires and
-- releases) use. redis.go puts it after an algorithm's check part and
-- before its lease part, so that a call of checks stops before it: the
-- closures made here, anew on every call, would cost it Redis time for
-- nothing (about 0.1 µs each).

-- water_level is core_holders.go's waterLevel: the level at which the wants,
-- each capped at it, sum to avail; math.huge when they all fit.
local function water_level(avail, wants)
  sort(wants)
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

-- none is the wants of no other holder, shared so as to spare a table.
local none = {}

-- fallback_nodes is core_holders.go's fallbackNodes: what a holder's
-- fallback is to divide by, count or more, so that the holders' parts of
-- the rule (taken, the others') sum to no more than the whole.
local function fallback_nodes(count, taken)
  local rest = 1 - taken
  if rest <= 1e-9 then
    return 2147483647
  end
  return min(max(count, ceil(1 / rest - 1e-9)), 2147483647)
end

-- hold is core_holders.go's hold: records node as a holder wanting want
-- tokens and want_rate tokens per second until now+ttl, forgets the holders
-- whose absence has ended, and returns the wants of the other present
-- holders, the count of the holders, absent ones included, and what the
-- node's fallback is to divide by; it records as the node's n the least of
-- that and what the node said (req.fallback_nodes, 0: it did not). Its
-- share is lend_rate's.
local function hold(st, node, want, want_rate, now, held, epoch)
  local others, count, parts = none, 1, nil
  for n, h in pairs(st.holders) do
    if h[1] + absence <= now then
      st.holders[n] = nil
    elseif n ~= node then
      if h[1] > now then
        if others == none then
          others = {}
        end
        others[#others + 1] = h[2]
      end
      parts = parts or {}
      parts[#parts + 1] = 1 / max(h[9], 1)
      count = count + 1
    end
  end
  local told = fallback_nodes(count, sorted_sum(parts))
  local n = told
  if req.fallback_nodes > 0 then
    n = min(n, req.fallback_nodes)
  end
  st.holders[node] = { now + ttl, want, want_rate, 0, 0, 0, held, epoch, n }
  st.held = node
  return others, count, told
end

-- givable is core_holders.go's givable: what node may give back at now of what
-- it was lent in window epoch.
local function givable(st, node, now, epoch)
  local h = st.holders[node]
  if h == nil or h[1] <= now or h[8] ~= epoch then
    return 0
  end
  return h[7] + h[4] * max(min(now, h[1]) - (h[1] - ttl), 0) / 1e6
end

-- bound_held is core_holders.go's heldReport.bound: what the store believes
-- a holder holds, capped by what it says (held; -1: it did not say).
local function bound_held(can, held)
  if held < 0 then
    return can
  end
  return min(can, held)
end

-- give_back is core_holders.go's giveBack: the tokens credited (none
-- without held: an older node's return may be of tokens it spent), and
-- what node may still give back.
local function give_back(st, node, now, epoch, tokens, held)
  local can = givable(st, node, now, epoch)
  if held < 0 then
    return 0, 0
  end
  local credited = min(tokens, held, floor(can))
  return credited, bound_held(can, held) - credited
end

-- cap_consumed is core_holders.go's capConsumed, capacity being the rule's.
local function cap_consumed(st, capacity, node, now, consumed, age)
  if consumed <= 0 then
    return 0
  end
  local n = 1
  for h, o in pairs(st.holders) do
    if h ~= node and o[1] + absence > now then
      n = n + 1
    end
  end
  local self = st.holders[node]
  if self and self[1] + absence > now then
    n = min(n, max(self[9], 1))
  end
  local cap = capacity / n + min(age, absence) * (limit / period) / n
  return min(consumed, ceil(min(cap, max_wait)))
end

-- lent is core_holders.go's lent: a grant adds to what the holder may give
-- back.
local function lent(st, node, g)
  local h = st.holders[node]
  h[7] = h[7] + g
end

-- unmet is core_holders.go's unmet: what a window holder's request was not
-- lent is its want.
local function unmet(st, node, want)
  st.holders[node][2] = max(want, 0)
end

-- remember records what the holder's request was granted, under its
-- sequence number, for replay.
local function remember(st, req, granted)
  if req.seq > 0 then
    local h = st.holders[req.node]
    h[5], h[6] = req.seq, granted
  end
end

-- rate_reply is a lent rate as a reply carries it.
local function rate_reply(r)
  if r == 0 then
    return '0'
  end
  return fmt(r)
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
    if o[1] + absence > now then
      count = count + 1
    end
  end
  local applied = h[1] - ttl
  local lease_ttl, epoch, remaining = ttl, 0, 0
  if window == nil then
    remaining = floor(max(st.t, 0))
  else
    epoch = (applied - fmod(applied, period)) / period
    remaining = floor(max(limit - st.t, 0))
    lease_ttl = max(min(ttl, (epoch + 1) * period - applied), 0)
  end
  return { h[6], remaining, lease_ttl, 0, count, epoch, rate_reply(h[4]), 0, 0, max(h[9], 1) }
end

-- fair_grant is core_holders.go's fairGrant: water-filling over the holders'
-- wants.
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
  local g = min(want, floor(min(level, want)))
  if g < 1 then
    g = 1
  end
  return g
end

-- forget drops node as a holder (a release); save leaves it out.
local function forget(st, node)
  st.holders[node] = nil
end

-- debit_window is core_window.go's window.debit, on a state rolled to the
-- window starting at start, deciding at at: consumption that began in an
-- ended window is dropped. It returns what it added.
local function debit_window(st, consumed, age, at, start)
  if at - age < start then
    return 0
  end
  local before = st.t
  st.t = min(st.t + consumed, 2 * limit)
  return st.t - before
end

-- settle_window is core_debt.go's window.settle: settled tokens counted in
-- a rolled window, up to its limit and the rule's debt.
local function settle_window(st, settled)
  if settled <= 0 then
    return
  end
  st.t = st.t + min(settled, max(limit + req.max_debt - st.t, 0))
end

-- mark_back is core_absence.go's markBack: whether req, granted, came back
-- from a reserved absence (prev: its holder before the request), and so
-- keeps its reservation until its next request. window is true for a
-- window rule, epoch then the current window and counted what the request
-- reported in it.
local function mark_back(st, req, prev, now, epoch, counted, window)
  if prev == nil or prev[1] + absence <= now then
    return
  end
  local stop = prev[1]
  if window then
    stop = min(stop, (prev[8] + 1) * period)
  end
  if stop > now or (req.consumed <= 0 and not req.on_fallback) then
    return
  end
  local used = 0
  if window then
    if stop <= epoch * period then
      used = counted
    elseif prev[13] and prev[8] == epoch then
      used = prev[15] + counted
    else
      return
    end
  end
  local h = st.holders[req.node]
  h[13], h[14], h[15] = now, share_n(prev), used
end
