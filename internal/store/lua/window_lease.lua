-- window_lease.lua: acquireWindow (core_window.go), release and report of
-- core.go, the lease part of both window algorithms, written once. The
-- algorithm's lease file before it (fixed_window_lease.lua,
-- sliding_window_lease.lua) says what differs: kind, credit, used_at,
-- refused_retry and counts_until; redis_scripts.go appends both, after
-- lease.lua, to the algorithm's script.

-- report is core.go's report for a strict window.
local function report(now, req)
  local st = load(now, true) or fresh()
  local consumed = cap_consumed(st, limit, req.node, now, req.consumed, req.age)
  local _, start, stop, at = roll(st, now)
  debit_window(st, consumed, req.age, at, start)
  settle_window(st, req.settled)
  st.x = max(counts_until(start, stop) + ttl, kept_until(st))
  save(st, now)
  return { 0, floor(max(limit - st.t, 0)), ttl, 0, 0, 0, '0' }
end

local function acquire(now, req)
  if req.strict then
    return report(now, req)
  end
  local st = load(now, true) or fresh()
  local again = replay(st, now, req, kind)
  if again then
    return again
  end
  local epoch, start, stop, at = roll(st, now)
  -- What the holder was lent in an ended window is gone with it: it may
  -- give back only what it was lent in this one.
  local credited = give_back(st, req.node, now, req.returned_epoch, req.returned, req.held)
  credit(st, epoch, credited, req.returned_epoch)
  local held = bound_held(givable(st, req.node, now, epoch), req.held)
  if req.returned_epoch == epoch then
    held = held - credited
  end
  local prev = st.holders[req.node]
  local kept = window_reserved(prev, now, start)
  local added = debit_window(st, cap_consumed(st, limit, req.node, now, req.consumed, req.age), req.age, at, start)
  -- A holder restarted under its name (core_window.go's restarted): what
  -- its fallback may have admitted here before, kept for it, counts spent.
  if prev and req.seq > 0 and prev[5] > 0 and req.seq ~= prev[5] + 1 and req.consumed <= 0 and not req.on_fallback then
    st.t = st.t + kept
  end
  settle_window(st, req.settled)
  local others, holders, told = hold(st, req.node, req.want, req.want_rate, now, held, epoch)
  -- What the absent holders may admit on their fallback in this window is
  -- not lent (core_absence.go).
  local reserve = window_reserve(st, now, start)
  local used = used_at(st, at, start) + reserve
  local avail = floor(max(limit - used, 0))
  local g = fair_grant(avail, req.want, others)
  -- A holder renewing from a lease (its request next after the last
  -- applied) is lent at least the l/n the window kept back for it, as far
  -- as the room allows (core_window.go).
  if prev and req.seq > 0 and req.seq == prev[5] + 1 and req.consumed <= 0 and not req.on_fallback then
    g = max(g, min(req.want, floor(kept), avail))
  end
  st.t = st.t + g
  lent(st, req.node, g)
  unmet(st, req.node, req.want - g)
  mark_back(st, req, prev, now, epoch, added, true)
  remember(st, req, g)
  local remaining = floor(max(limit - used - g, 0))
  local retry = 0
  if g < req.want then
    retry = refused_retry(st, at, start, stop, req.want - g, remaining, reserve)
  end
  st.x = max(counts_until(start, stop) + ttl, kept_until(st))
  save(st, now)
  -- Tokens of a window die with it (core_window.go).
  return { g, remaining, min(ttl, stop - at), retry, holders, epoch, '0', 0, 0, told }
end

-- A return is credited to the window it was leased in, while that window
-- still counts (credit); a missing state takes nothing back.
local function release(now, node, tokens, ret_epoch, held)
  local st = load(now, true)
  if not st then
    return {}
  end
  local credited = give_back(st, node, now, ret_epoch, tokens, held)
  forget(st, node)
  local epoch = roll(st, now)
  credit(st, epoch, credited, ret_epoch)
  save(st, now)
  return {}
end

return dispatch(acquire, release, check)
