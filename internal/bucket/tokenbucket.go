package bucket

import (
	"fmt"
	"math"
	"time"
)

// TokenBucket holds up to capacity tokens and gains them at a steady rate; a
// request of cost n passes when n whole tokens are there, and spends them. It
// starts full, so a client may burst up to capacity, then runs at the rate.
// Refill is lazy: each call credits the time since the latest instant seen.
//
// Tokens can also arrive by Deposit, which is how leases fill a local bucket;
// NewLeasedBucket makes a bucket whose only source is Deposit.
//
// The state is exact. The rate is a whole number of tokens per whole number
// of nanoseconds (see NewTokenBucketPer), and the bucket keeps whole tokens
// plus the part of the next one in units of 1/per. Refill is integer
// arithmetic with 128-bit intermediates, so no amount of stepping drifts.
//
// A TokenBucket is safe for concurrent use. Its decision allocates nothing,
// reads no clock, and holds the mutex only for the arithmetic.
type TokenBucket struct {
	guard
	capacity int64
	rate     rate  // rate.tokens == 0: tokens come only from Deposit
	tokens   int64 // whole tokens, 0..capacity
	frac     int64 // the next token's part, in 1/rate.per; 0 when full
	last     int64 // latest instant seen, Unix ns; it never moves back
}

// NewTokenBucket returns a full bucket of capacity tokens that gains rate
// tokens per second. A float rate is read as the simplest fraction that
// rounds to it (3, 0.5, 1000.0/60 are exact); use NewTokenBucketPer to give
// the fraction yourself.
func NewTokenBucket(capacity int64, rate float64, now time.Time) (*TokenBucket, error) {
	if err := checkCapacity(capacity); err != nil {
		return nil, err
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("bucket: token bucket: rate must be positive and finite, got %v", rate)
	}
	r, ok := rateFromFloat(rate)
	if !ok {
		return nil, fmt.Errorf("bucket: token bucket: rate %v tokens/s is out of range", rate)
	}
	return newTokenBucket(capacity, r, now), nil
}

// NewTokenBucketPer returns a full bucket of capacity tokens that gains
// tokens per period: NewTokenBucketPer(200, 1000, time.Minute, now) is a
// burst of 200 at 1,000 a minute, exactly.
func NewTokenBucketPer(capacity, tokens int64, period time.Duration, now time.Time) (*TokenBucket, error) {
	if err := checkCapacity(capacity); err != nil {
		return nil, err
	}
	if tokens <= 0 {
		return nil, fmt.Errorf("bucket: token bucket: tokens per period must be positive, got %d", tokens)
	}
	if period <= 0 {
		return nil, fmt.Errorf("bucket: token bucket: period must be positive, got %v", period)
	}
	g := gcd(tokens, int64(period))
	return newTokenBucket(capacity, rate{tokens: tokens / g, per: int64(period) / g}, now), nil
}

// NewLeasedBucket returns an empty bucket that gains tokens only by Deposit:
// the local end of a lease. Time brings nothing, so a refusal cannot say
// when to retry: its RetryAfter and ResetAfter are 0 and the lease layer,
// which knows when it will deposit, answers instead.
func NewLeasedBucket(capacity int64) (*TokenBucket, error) {
	if err := checkCapacity(capacity); err != nil {
		return nil, err
	}
	b := newTokenBucket(capacity, rate{per: 1}, time.Time{})
	b.tokens = 0
	b.last = math.MinInt64
	return b, nil
}

func checkCapacity(capacity int64) error {
	if capacity <= 0 {
		return fmt.Errorf("bucket: token bucket: capacity must be positive, got %d", capacity)
	}
	return nil
}

func newTokenBucket(capacity int64, r rate, now time.Time) *TokenBucket {
	b := &TokenBucket{capacity: capacity, rate: r, tokens: capacity, last: now.UnixNano()}
	b.order = nextOrder()
	return b
}

// Allow is AllowN(now, 1) reduced to its answer.
func (b *TokenBucket) Allow(now time.Time) bool {
	d, _ := b.AllowN(now, 1)
	return d.Allowed
}

// AllowN spends n tokens if n whole tokens are there at now.
func (b *TokenBucket) AllowN(now time.Time, n int64) (Decision, error) {
	return decide(b, now, n)
}

// Deposit adds n tokens, as a lease grant does, and reports how many fitted
// under capacity; the rest is the caller's to give back. n <= 0 adds nothing.
func (b *TokenBucket) Deposit(n int64) int64 {
	if n <= 0 {
		return 0
	}
	b.mu.Lock()
	room := b.capacity - b.tokens
	if n >= room {
		n, b.tokens, b.frac = room, b.capacity, 0
	} else {
		b.tokens += n
	}
	b.mu.Unlock()
	return n
}

// Drain removes the whole tokens the bucket holds as of the latest instant
// seen and returns their number: a lease that expires or goes back to the
// allocator takes its tokens with it.
func (b *TokenBucket) Drain() int64 {
	b.mu.Lock()
	n := b.tokens
	b.tokens = 0
	b.mu.Unlock()
	return n
}

// Cap keeps at most n whole tokens as of now, refill up to now counted
// first: a bucket that takes over from another source of tokens starts from
// what that source had left, not from what this one saved up meanwhile.
func (b *TokenBucket) Cap(now time.Time, n int64) {
	b.mu.Lock()
	b.advanceLocked(now.UnixNano())
	if n = max(n, 0); b.tokens > n {
		b.tokens = n
	}
	b.mu.Unlock()
}

// Full reports whether the bucket holds its whole capacity at now, refill
// up to now counted: a bucket made anew would decide as this one.
func (b *TokenBucket) Full(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now.UnixNano())
	return b.tokens == b.capacity
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
	if b.tokens == b.capacity || b.rate.tokens == 0 {
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

// peekLocked decides a request of cost n at now as if it were spent when
// allowed, and changes nothing but the refill: Multi peeks every rule before
// it spends any.
func (b *TokenBucket) peekLocked(now time.Time, n int64) Decision {
	t := now.UnixNano()
	b.advanceLocked(t)
	lag := behind(b.last, t)
	d := Decision{Limit: b.capacity, Remaining: b.tokens}
	if n <= b.tokens {
		d.Allowed = true
		d.Remaining -= n
		d.ResetAfter = b.until(lag, b.capacity-d.Remaining)
		return d
	}
	d.RetryAfter = b.until(lag, n-b.tokens)
	d.ResetAfter = b.until(lag, b.capacity-b.tokens)
	return d
}

// until is how long from the caller's instant until whole more tokens are in
// (counting the part of the next one already there). Zero when nothing is
// missing, and for a deposit-only bucket, whose time brings nothing.
func (b *TokenBucket) until(lag time.Duration, whole int64) time.Duration {
	if whole <= 0 || b.rate.tokens == 0 {
		return 0
	}
	return addDurations(lag, b.rate.timeToGain(whole, b.frac))
}

// spendLocked takes n tokens after a peek at the same instant allowed it.
func (b *TokenBucket) spendLocked(n int64) {
	b.tokens -= n
}

func (b *TokenBucket) ceiling() int64 { return b.capacity }
