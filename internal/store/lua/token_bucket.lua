-- token_bucket.lua: acquireBucket, release and checkBucket of core.go.
-- State: a hash with t (tokens, may be negative: bounded debt), s (µs of the
-- last refill), x (expiry) and the holders.

local capacity = burst
local rate = limit / period

local function fresh(now)
  return { t = capacity, s = now, p = 0, holders = {} }
end

-- A clock that steps back earns nothing and does not move the stamp back.
local function refill(st, now)
  if now > st.s then
    st.t = math.min(capacity, st.t + (now - st.s) * rate)
    st.s = now
  end
end

local function save_bucket(st, now)
  save(st, now, { 't', fmt(st.t), 's', fmt(st.s) })
end

local function acquire(now, node, want, consumed, age)
  local st = load(now, true) or fresh(now)
  refill(st, now)
  local floor = math.min(st.t, -math.max(capacity - age * rate, 0))
  st.t = math.max(st.t - consumed, floor)
  local others, holders = hold(st, node, want, now)
  local g = fair_grant(math.floor(math.max(st.t, 0)), want, others)
  st.t = st.t - g
  local remaining = math.floor(math.max(st.t, 0))
  local retry = 0
  if g < want then
    local need = math.min(want - g, capacity)
    if st.t < need then
      retry = ceil_us((need - st.t) / rate)
    end
  end
  st.x = now + ceil_us((capacity - st.t) / rate) + ttl
  save_bucket(st, now)
  return { g, remaining, ttl, retry, holders, 0 }
end

-- A missing state is a full bucket: a return to it changes nothing, so
-- nothing is written.
local function release(now, node, tokens)
  local st = load(now)
  if not st then
    return {}
  end
  forget(node)
  refill(st, now)
  st.t = math.min(capacity, st.t + tokens)
  save_bucket(st, now)
  return {}
end

local function check(now, cost)
  local st = load(now) or fresh(now)
  refill(st, now)
  local allowed, retry = 0, 0
  if st.t >= cost then
    st.t = st.t - cost
    allowed = 1
  else
    retry = ceil_us((cost - st.t) / rate)
  end
  local remaining = math.floor(math.max(st.t, 0))
  local reset = ceil_us((capacity - st.t) / rate)
  st.x = now + ceil_us((capacity - st.t) / rate) + ttl
  save_bucket(st, now)
  return { allowed, remaining, retry, reset }
end

return dispatch(acquire, release, check)
