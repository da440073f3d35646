package bucket

import (
	"math"
	"math/bits"
	"time"
)

// rate is a speed kept as an exact fraction: tokens per a whole number of
// nanoseconds. Refill and release schedules are then integer arithmetic, so a
// million small steps give exactly what one big step gives, and a rate such
// as 3/s or 1000/min never drifts the way 1/rate in float nanoseconds would.
type rate struct {
	tokens int64 // gained per `per`; 0 means time alone brings nothing
	per    int64 // nanoseconds, > 0
}

// rateFromFloat turns tokens per second into a rate. It takes the simplest
// fraction p/q that rounds to perSecond, so the float 1000.0/60 becomes
// exactly 50/3 and 0.1 becomes 1/10: what the caller meant, not the binary
// rounding of it. When no such fraction fits in int64 nanoseconds, the
// closest one that does is used (the error is below float64 precision for
// any rate that is not extreme). ok is false when the rate is too small or
// too large to represent at all.
func rateFromFloat(perSecond float64) (r rate, ok bool) {
	if !(perSecond > 0) || math.IsInf(perSecond, 0) {
		return rate{}, false
	}
	fits := func(p, q int64) bool {
		_, ok := toRate(p, q)
		return ok
	}
	p, q := simplestFraction(perSecond, fits)
	if p <= 0 {
		return rate{}, false // only 0/1 fitted: too slow to express
	}
	return toRate(p, q)
}

// toRate turns p/q tokens per second into tokens per nanoseconds, reduced,
// and reports whether the nanoseconds fit in int64.
func toRate(p, q int64) (rate, bool) {
	g := gcd(p, int64(time.Second))
	scale := int64(time.Second) / g
	if q <= 0 || q > math.MaxInt64/scale {
		return rate{}, false
	}
	return rate{tokens: p / g, per: q * scale}, true
}

// simplestFraction walks the continued-fraction convergents of x and stops at
// the first that rounds back to x; convergents are the best approximations
// for their size, so the first exact one is the simplest. It returns the last
// convergent accepted by fits, or 0/0 when none is.
func simplestFraction(x float64, fits func(p, q int64) bool) (p, q int64) {
	h0, h1, k0, k1 := int64(0), int64(1), int64(1), int64(0)
	r := x
	for range 64 {
		a := math.Floor(r)
		if a >= 1<<62 {
			break
		}
		h, okh := mulAdd(int64(a), h1, h0)
		k, okk := mulAdd(int64(a), k1, k0)
		if !okh || !okk || !fits(h, k) {
			break
		}
		h0, h1, k0, k1 = h1, h, k1, k
		p, q = h, k
		if float64(h)/float64(k) == x || r == a {
			break
		}
		r = 1 / (r - a)
	}
	return p, q
}

// mulAdd returns a*b+c for non-negative operands, and whether it fits.
func mulAdd(a, b, c int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, carry := bits.Add64(lo, uint64(c), 0)
	if hi != 0 || carry != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
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
	q, rem := div128(hi, lo, uint64(r.per))
	return q, int64(rem), true
}

// timeToGain is how long this rate takes to bring whole tokens when frac of
// the first is already there, rounded up to a whole nanosecond (the first
// instant at which they are all in). Zero when nothing is missing or when
// time brings nothing (a deposit-only bucket cannot say when).
func (r rate) timeToGain(whole, frac int64) time.Duration {
	if whole <= 0 || r.tokens == 0 {
		return 0
	}
	// missing = whole*per - frac, in units of 1/per token; frac < per.
	hi, lo := bits.Mul64(uint64(whole), uint64(r.per))
	lo, borrow := bits.Sub64(lo, uint64(frac), 0)
	hi -= borrow
	lo, carry := bits.Add64(lo, uint64(r.tokens)-1, 0) // round up
	hi += carry
	if hi >= uint64(r.tokens) {
		return math.MaxInt64
	}
	q, _ := div128(hi, lo, uint64(r.tokens))
	return toDuration(q)
}

// mulDiv returns floor(a*b/d) and whether a*b%d != 0, for a*b < d<<64.
// Callers guarantee that bound; a result above int64 saturates.
func mulDiv(a, b, d uint64) (q uint64, inexact bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= d {
		return math.MaxInt64, true
	}
	q, rem := div128(hi, lo, d)
	return q, rem != 0
}

// div128 divides hi:lo by d (hi < d), using the cheap 64-bit division when
// the high word is empty, as it is for all everyday parameters.
func div128(hi, lo, d uint64) (q, rem uint64) {
	if hi == 0 {
		return lo / d, lo % d
	}
	return bits.Div64(hi, lo, d)
}

// toDuration saturates a nanosecond count at the largest Duration.
func toDuration(ns uint64) time.Duration {
	if ns > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}
