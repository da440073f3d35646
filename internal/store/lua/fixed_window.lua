-- fixed_window.lua: checkWindow of core_window.go for fixed windows, and what
-- their checks and leases share (fixed_window_lease.lua and window_lease.lua hold the rest). State
-- (see common.lua): t (count of the current window), s (the window index), x
-- (expiry) and the holders; p is 0, or a calendar window's end. A check reads the holders too: it admits
-- no more than a lease would lend, with the absent holders' part kept back.

local function fresh()
  return { t = 0, p = 0, s = 0, holders = {} }
end

-- roll moves the state to the window holding now, and returns its index,
-- its start and end, and the instant to decide at. fmod is exact, so the
-- index is the same integer division core.go performs. A window never
-- moves backwards: a clock that stepped back before the state's window
-- decides at its start. A calendar window is indexed by its start and
-- keeps its end in p (core_window.go).
local function roll(st, now)
  if bounds then
    local start, stop = calendar_window(now)
    if start > st.s then
      st.t, st.s, st.p = 0, start, stop
    end
    return st.s, st.s, st.p, max(now, st.s)
  end
  local epoch = max((now - fmod(now, period)) / period, st.s)
  if st.s ~= epoch then
    st.t, st.s = 0, epoch
  end
  local start = epoch * period
  return epoch, start, start + period, max(now, start)
end

local function check(now, cost)
  local st = load(now, true) or fresh()
  local _, start, stop, at = roll(st, now)
  local used = st.t + window_reserve(st, now, start)
  local allowed = 0
  if used + cost <= limit then
    st.t = st.t + cost
    used = used + cost
    allowed = 1
  end
  local remaining = floor(max(limit - used, 0))
  local retry = 0
  if allowed == 0 then
    retry = stop - at
  end
  st.x = max(stop + ttl, kept_until(st))
  save(st, now)
  return { allowed, remaining, retry, stop - at }
end

-- A call of checks ends here. A call of leases goes on with lease.lua,
-- fixed_window_lease.lua and window_lease.lua, which redis_scripts.go
-- appends.
if ARGV[1] == 'c' then
  return dispatch(nil, nil, check)
end
