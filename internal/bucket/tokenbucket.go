// Package bucket is an exact, in-process token bucket for what a process
// throttles on its own, without I/O: its log lines (lograte, client). The
// rules' algorithms are not here: they live in internal/store (core_*.go).
package bucket

import (
	"fmt"
	"math/bits"
	"sync"
	"time"
)

// TokenBucket holds up to capacity tokens and gains them at a steady rate; a
// request passes when a whole token is there, and spends it. It starts full,
// so a caller may burst up to capacity, then runs at the rate. Refill is
// lazy: each call credits the time since the latest instant seen.
//
// The state is exact. The rate is a whole number of tokens per whole number
// of nanoseconds (see NewTokenBucketPer), and the bucket keeps whole tokens
// plus the part of the next one in units of 1/per. Refill is integer
// arithmetic with 128-bit intermediates, so no amount of stepping drifts.
//
// A TokenBucket is safe for concurrent use. Allow allocates nothing, reads
// no clock, and holds the mutex only for the arithmetic.
type TokenBucket struct {
	mu       sync.Mutex
	capacity int64
	rate     rate
	tokens   int64 // whole tokens, 0..capacity
	frac     int64 // the next token's part, in 1/rate.per; 0 when full
	last     int64 // latest instant seen, Unix ns; it never moves back
}

// NewTokenBucketPer returns a full bucket of capacity tokens that gains
// tokens per period: NewTokenBucketPer(200, 1000, time.Minute, now) is a
// burst of 200 at 1,000 a minute, exactly.
func NewTokenBucketPer(capacity, tokens int64, period time.Duration, now time.Time) (*TokenBucket, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("bucket: token bucket: capacity must be positive, got %d", capacity)
	}
	if tokens <= 0 {
		return nil, fmt.Errorf("bucket: token bucket: tokens per period must be positive, got %d", tokens)
	}
	if period <= 0 {
		return nil, fmt.Errorf("bucket: token bucket: period must be positive, got %v", period)
	}
	g := gcd(tokens, int64(period))
	r := rate{tokens: tokens / g, per: int64(period) / g}
	return &TokenBucket{capacity: capacity, rate: r, tokens: capacity, last: now.UnixNano()}, nil
}

// Allow spends a token if a whole one is there at now. An instant earlier
// than one already seen is taken as the latest seen: a clock that goes
// backwards never mints tokens.
func (b *TokenBucket) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now.UnixNano())
	if b.tokens == 0 {
		return false
	}
	b.tokens--
	return true
}

// advanceLocked credits the time from the latest instant seen to t. An
// earlier t credits nothing and leaves last alone: crediting on the way
// back and again on the way forward would mint the same interval twice.
func (b *TokenBucket) advanceLocked(t int64) {
	if t <= b.last {
		return
	}
	elapsed := uint64(t - b.last) // exact even when t-last overflows int64
	b.last = t
	if b.tokens == b.capacity {
		return
	}
	whole, frac, ok := b.rate.gain(elapsed, b.frac)
	if !ok || whole >= uint64(b.capacity-b.tokens) {
		b.tokens, b.frac = b.capacity, 0
		return
	}
	b.tokens += int64(whole)
	b.frac = frac
}

// rate is a speed kept as an exact fraction: tokens per a whole number of
// nanoseconds, reduced. A rate such as 3/s or 1000/min then never drifts the
// way 1/rate in float nanoseconds would, and a million small steps give
// exactly what one big step gives.
type rate struct {
	tokens int64 // gained per `per`, > 0
	per    int64 // nanoseconds, > 0
}

// gain is what this rate brings in elapsed nanoseconds on top of frac
// (a part of a token in units of 1/per): whole tokens and the new fraction.
// ok is false when the whole tokens exceed 64 bits, which is more than any
// capacity, so the caller simply fills up.
func (r rate) gain(elapsed uint64, frac int64) (whole uint64, rest int64, ok bool) {
	hi, lo := bits.Mul64(elapsed, uint64(r.tokens))
	lo, carry := bits.Add64(lo, uint64(frac), 0)
	hi += carry
	if hi >= uint64(r.per) {
		return 0, 0, false
	}
	if hi == 0 { // the cheap 64-bit division, as for all everyday parameters
		return lo / uint64(r.per), int64(lo % uint64(r.per)), true
	}
	q, rem := bits.Div64(hi, lo, uint64(r.per))
	return q, int64(rem), true
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
