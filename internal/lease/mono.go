package lease

import (
	"math"
	"time"
)

// mono is an instant of the manager's time: the clock's monotonic reading
// in nanoseconds, counted from monoOrigin before the clock's own origin.
// It takes 8 bytes where a time.Time takes 24; a pool holds up to eight.
//
// Like time.Time's, the zero value is no instant (IsZero) and comes long
// before any real one: a zero "last call" is long ago. Add and Sub
// saturate where time.Time would not overflow, so comparisons come out as
// they would on time.Time.
type mono int64

// monoOrigin is where the clock's origin lies: 2^62 ns (146 years) after
// mono's zero, so that no reading of the clock is zero and a zero instant
// is always long past.
const monoOrigin = 1 << 62

// monoAt is the instant d after the clock's origin.
func monoAt(d time.Duration) mono { return mono(monoOrigin).Add(d) }

// IsZero reports whether t is no instant.
func (t mono) IsZero() bool { return t == 0 }

// Before reports whether t is before u.
func (t mono) Before(u mono) bool { return t < u }

// After reports whether t is after u.
func (t mono) After(u mono) bool { return t > u }

// Equal reports whether t and u are the same instant.
func (t mono) Equal(u mono) bool { return t == u }

// Add is the instant d after t.
func (t mono) Add(d time.Duration) mono {
	s := t + mono(d)
	switch {
	case d > 0 && s < t:
		return math.MaxInt64
	case d < 0 && s > t:
		return math.MinInt64
	}
	return s
}

// Sub is the time from u to t.
func (t mono) Sub(u mono) time.Duration {
	d := time.Duration(t - u)
	switch {
	case u < 0 && d < time.Duration(t): // t - u overflowed upwards
		return math.MaxInt64
	case u > 0 && d > time.Duration(t): // downwards
		return math.MinInt64
	}
	return d
}

// time is t as a time.Time on the manager's time, for callers outside the
// loop: the clock's origin is the Unix epoch.
func (t mono) time() time.Time {
	return time.Unix(0, 0).Add(time.Duration(t - monoOrigin))
}

// sinceOrigin is t as a duration from the clock's origin: what Mono reads.
func (t mono) sinceOrigin() time.Duration { return time.Duration(t - monoOrigin) }
