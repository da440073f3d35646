package fallback

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Charge counts n more tokens for a request the allowance admitted whose
// cost, known once its work ended, passed what it took
// (client.Reservation.Settle). A token bucket's allowance goes below empty
// by its part of the rule's debt at most (r.Debt()/N), and its refill
// repays that before it admits again; a window's counts the whole cost in
// its window, which then admits nothing more until the next. What it
// counts is reported and debited centrally, as any fallback admission is.
// It returns what it counted, and false when the allowance was closed (the
// key is served again: its lease pays). now is the node's monotonic clock.
func (a *Allowance) Charge(r *rules.Rule, now time.Duration, n int64) (int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, false
	}
	got := n
	if r.Algorithm == rules.TokenBucket {
		debt := float64(r.Debt()) / float64(max(a.nodes, 1))
		got = min(n, int64(math.Floor(math.Max(a.tokens+debt, 0))))
		a.tokens -= float64(got)
	} else {
		a.used += n
	}
	if got > 0 {
		if a.consumed <= 0 {
			a.since = now
		}
		a.consumed += got
	}
	return got, true
}
