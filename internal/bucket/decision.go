// Package bucket decides locally whether a request may pass, by the classic algorithms
// (token bucket, fixed window, sliding log, sliding window, leaky-bucket queue), exactly and without I/O.
package bucket

import (
	"errors"
	"math"
	"time"
)

// Decision is what a caller needs to answer a client: whether the request
// passes and the numbers for Retry-After and the RateLimit header fields.
type Decision struct {
	Allowed    bool
	Limit      int64         // the rule's capacity or limit
	Remaining  int64         // whole tokens left after this decision, never negative
	RetryAfter time.Duration // 0 when allowed; else how long until a request of this cost could pass
	ResetAfter time.Duration // how long until the limiter is back to full or the window resets
}

var (
	// ErrInvalidCost is returned for a cost of zero or less.
	ErrInvalidCost = errors.New("bucket: cost must be positive")

	// ErrCostAboveCapacity is returned for a cost that can never pass. It is
	// an error, never a silent refusal, so callers can tell "never" (answer
	// 400 or split the request) from "not now" (answer 429, Retry-After).
	ErrCostAboveCapacity = errors.New("bucket: cost exceeds capacity")
)

// Limiter is one algorithm instance for one key; safe for concurrent use.
//
// AllowN decides whether a request of cost n may pass at instant now and, if
// so, spends n. Time is a parameter so that callers read the clock once per
// request (or not at all) and tests need no fake clock. An instant earlier
// than one already seen is taken as the latest seen: a clock that goes
// backwards never mints tokens or reopens a window. Durations in the Decision
// are measured from the caller's now.
type Limiter interface {
	AllowN(now time.Time, n int64) (Decision, error)
}

// checkCost sorts out the costs that no instant could ever let through.
func checkCost(n, capacity int64) error {
	if n <= 0 {
		return ErrInvalidCost
	}
	if n > capacity {
		return ErrCostAboveCapacity
	}
	return nil
}

// behind is how far the caller's instant t lies before the latest instant
// seen: what a backward clock adds to every wait.
func behind(latest, t int64) time.Duration {
	if t >= latest {
		return 0
	}
	return toDuration(uint64(latest - t))
}

// addDurations adds two non-negative durations, saturating rather than
// wrapping, so a huge window or a far-behind caller never yields a negative wait.
func addDurations(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
