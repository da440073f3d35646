-- sliding_window_lease.lua: what window_lease.lua's acquire, release and
-- report (core_window.go's acquireWindow) need to know of a sliding window
-- counter.

local kind = 'sliding'

-- credit takes back tokens of the window of index from, while that window
-- still counts: as the current one, or as the previous one.
local function credit(st, epoch, tokens, from)
  if from == epoch then
    st.t = max(st.t - tokens, 0)
  elseif from == epoch - 1 then
    st.p = max(st.p - tokens, 0)
  end
end

-- used_at is what counts against the limit at at: the weighted estimate.
local function used_at(st, at, start)
  return estimate(st, at, start)
end

-- refused_retry is when a request refused want more tokens may pass: when
-- the previous window has faded enough (sliding_retry).
local function refused_retry(st, at, start, stop, want, remaining, reserve)
  return sliding_retry(st, at, start, min(want, limit), reserve)
end

-- counts_until is when the window stops counting: a period after its end,
-- as the previous one.
local function counts_until(start, stop)
  return start + 2 * period
end
