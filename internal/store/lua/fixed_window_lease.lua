-- fixed_window_lease.lua: what window_lease.lua's acquire, release and
-- report (core_window.go's acquireWindow) need to know of a fixed window.

local kind = 'fixed'

-- credit takes back tokens of the window of index from, while it is the
-- current one: a fixed window's past never counts again.
local function credit(st, epoch, tokens, from)
  if from == epoch then
    st.t = max(st.t - tokens, 0)
  end
end

-- used_at is what counts against the limit at at: the window's count.
local function used_at(st, at, start)
  return st.t
end

-- refused_retry is when a request refused want more tokens may pass: at
-- the window's end, once it has nothing left.
local function refused_retry(st, at, start, stop, want, remaining, reserve)
  if remaining == 0 then
    return stop - at
  end
  return 0
end

-- counts_until is when the window stops counting: its end.
local function counts_until(start, stop)
  return stop
end
