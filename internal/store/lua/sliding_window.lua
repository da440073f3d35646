-- sliding_window.lua: acquireWindow, release and checkWindow of core.go for
-- the sliding window counter. State (see common.lua): t (count of the
-- current window), p (count of the previous one), s (the window index), x
-- (expiry) and the holders. Only an acquire or a release reads the holders.

local function fresh()
  return { t = 0, p = 0, s = 0, holders = {}, list = {} }
end

-- roll moves the state to the window holding now; the window before it
-- becomes the previous one. It returns the window's index, its start and the
-- instant to decide at. fmod is exact, so the index is core.go's integer
-- division. A window never moves backwards: a clock that stepped back before
-- the state's window decides at its start.
local function roll(st, now)
  local epoch = max((now - fmod(now, period)) / period, st.s)
  if st.s ~= epoch then
    if st.s == epoch - 1 then
      st.p = st.t
    else
      st.p = 0
    end
    st.t, st.s = 0, epoch
  end
  local start = epoch * period
  return epoch, start, max(now, start)
end

-- The previous window weighted by how much of it the sliding window still
-- covers, plus the current one.
local function estimate(st, now, start)
  local weight = (period - (now - start)) / period
  return st.p * weight + st.t
end

-- How long until the window admits cost more tokens.
local function sliding_retry(st, now, start, cost)
  local room = limit - cost - st.t
  if room >= 0 then
    if st.p <= room then
      return 0
    end
    local at = start + period * (1 - room / st.p)
    return max(0, ceil_us(at - now))
  end
  local at = start + period + period * (1 - (limit - cost) / st.t)
  return max(0, ceil_us(at - now))
end

-- credit takes back tokens of the window of index from, while that window
-- still counts: as the current one, or as the previous one.
local function credit(st, epoch, tokens, from)
  if from == epoch then
    st.t = max(st.t - tokens, 0)
  elseif from == epoch - 1 then
    st.p = max(st.p - tokens, 0)
  end
end

-- report is core.go's report for a strict window.
local function report(now, req)
  local st = load(now) or fresh()
  local _, start = roll(st, now)
  debit_window(st, req.consumed, req.age)
  st.x = start + 2 * period + ttl
  save(st, now)
  return { 0, floor(max(limit - st.t, 0)), ttl, 0, 0, 0, '0' }
end

local function acquire(now, req)
  if req.strict then
    return report(now, req)
  end
  local st = load(now, true) or fresh()
  local again = replay(st, now, req, 'sliding')
  if again then
    return again
  end
  local epoch, start, at = roll(st, now)
  local credited = give_back(st, req.node, now, req.returned_epoch, req.returned)
  credit(st, epoch, credited, req.returned_epoch)
  local held = givable(st, req.node, now, epoch)
  if req.returned_epoch == epoch then
    held = held - credited
  end
  debit_window(st, cap_consumed(st, limit, req.node, now, req.consumed, req.age), req.age)
  local others, holders = hold(st, req.node, req.want, req.want_rate, now, held, epoch)
  local used = estimate(st, at, start)
  local g = fair_grant(floor(max(limit - used, 0)), req.want, others)
  st.t = st.t + g
  lent(st, req.node, g)
  remember(st, req, g)
  local remaining = floor(max(limit - used - g, 0))
  local retry = 0
  if g < req.want then
    retry = sliding_retry(st, at, start, min(req.want - g, limit))
  end
  st.x = start + 2 * period + ttl
  save(st, now)
  return { g, remaining, ttl, retry, holders, epoch, '0' }
end

-- A return is credited to the window it was leased in, while that window
-- still counts; a missing state takes nothing back.
local function release(now, node, tokens, ret_epoch)
  local st = load(now, true)
  if not st then
    return {}
  end
  local credited = give_back(st, node, now, ret_epoch, tokens)
  forget(st, node)
  local epoch = roll(st, now)
  credit(st, epoch, credited, ret_epoch)
  save(st, now)
  return {}
end

local function check(now, cost)
  local st = load(now) or fresh()
  local _, start, at = roll(st, now)
  local used = estimate(st, at, start)
  local allowed = 0
  if used + cost <= limit then
    st.t = st.t + cost
    used = used + cost
    allowed = 1
  end
  local remaining = floor(max(limit - used, 0))
  local stop = start + period
  local retry, reset = 0, 0
  if allowed == 0 then
    retry = sliding_retry(st, at, start, cost)
  end
  if st.t > 0 then
    reset = start + 2 * period - at
  elseif st.p > 0 then
    reset = stop - at
  end
  st.x = start + 2 * period + ttl
  save(st, now)
  return { allowed, remaining, retry, reset }
end

return dispatch(acquire, release, check)
