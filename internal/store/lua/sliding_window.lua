-- sliding_window.lua: checkWindow of core_window.go for the sliding window
-- counter, and what its checks and leases share (sliding_window_lease.lua
-- and window_lease.lua hold the rest). State (see common.lua): t (count of the current window), p
-- (count of the previous one), s (the window index), x (expiry) and the
-- holders. A check reads the holders too: it admits no more than a lease
-- would lend, with the absent holders' part kept back.

local function fresh()
  return { t = 0, p = 0, s = 0, holders = {} }
end

-- roll moves the state to the window holding now; the window before it
-- becomes the previous one. It returns the window's index, its start and
-- end, and the instant to decide at. fmod is exact, so the index is core.go's integer
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
  return epoch, start, start + period, max(now, start)
end

-- The previous window weighted by how much of it the sliding window still
-- covers, plus the current one.
local function estimate(st, now, start)
  local weight = (period - (now - start)) / period
  return st.p * weight + st.t
end

-- How long until the window admits cost more tokens, reserve being kept
-- back for absent holders (core_window.go's window.slidingRetry).
local function sliding_retry(st, now, start, cost, reserve)
  local count = st.t + reserve
  local room = limit - cost - count
  if room >= 0 then
    if st.p <= room then
      return 0
    end
    local at = start + period * (1 - room / st.p)
    return max(0, ceil_us(at - now))
  end
  local at = start + period + period * (1 - (limit - cost) / count)
  return max(0, ceil_us(at - now))
end

local function check(now, cost)
  local st = load(now, true) or fresh()
  local _, start, stop, at = roll(st, now)
  local reserve = window_reserve(st, now, start)
  local used = estimate(st, at, start) + reserve
  local allowed = 0
  if used + cost <= limit then
    st.t = st.t + cost
    used = used + cost
    allowed = 1
  end
  local remaining = floor(max(limit - used, 0))
  local retry, reset = 0, 0
  if allowed == 0 then
    retry = sliding_retry(st, at, start, cost, reserve)
  end
  if st.t > 0 then
    reset = start + 2 * period - at
  elseif st.p > 0 then
    reset = stop - at
  end
  st.x = max(start + 2 * period + ttl, kept_until(st))
  save(st, now)
  return { allowed, remaining, retry, reset }
end

-- A call of checks ends here. A call of leases goes on with lease.lua,
-- sliding_window_lease.lua and window_lease.lua, which redis_scripts.go
-- appends.
if ARGV[1] == 'c' then
  return dispatch(nil, nil, check)
end
