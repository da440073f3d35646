package store

import (
	"math"

	"github.com/allot-dev/allot/internal/mutate"
	"github.com/allot-dev/allot/internal/rules"
)

// Settled costs (see core.go): what reservations took beyond their
// estimate once their work ended, past what the node held to pay with
// (AcquireRequest.Settled). Unlike a fallback's consumption, which the
// node's share bounds (capConsumed), a settled cost is the work's own: it
// is taken in full, as a debt, down to the rule's max debt (rules.Rule.Debt)
// and no further. The debt is what keeps the fleet's bound: a bucket in
// debt lends nothing, and keeps back the rate that repays it (lendRate),
// so every token of it is paid by refill before another is admitted; a
// window counts it against its limit.

// settle takes settled tokens from a refilled bucket, which goes at most
// the rule's debt below empty, and returns what it took.
func (b *bucket) settle(r *rules.Rule, settled int64) float64 {
	if settled <= 0 || mutate.On(mutate.IgnoreSettled) {
		return 0
	}
	take := math.Min(float64(settled), math.Max(b.tokens+float64(r.Debt()), 0))
	b.tokens -= take
	return take
}

// settle counts settled tokens in a rolled window, up to its limit and
// the rule's debt, and returns what it counted. A window's debt is repaid
// by the window's end: the next one starts afresh.
func (w *window) settle(r *rules.Rule, settled int64) float64 {
	if settled <= 0 || mutate.On(mutate.IgnoreSettled) {
		return 0
	}
	take := math.Min(float64(settled), math.Max(float64(r.Limit+r.Debt())-w.count, 0))
	w.count += take
	return take
}

// settle logs settled tokens at now, up to the limit and the rule's debt
// over the log's count.
func (l *slidingLog) settle(r *rules.Rule, now, settled int64) {
	if settled <= 0 || mutate.On(mutate.IgnoreSettled) {
		return
	}
	if add := min(settled, r.Limit+r.Debt()-l.count()); add > 0 {
		l.add(now, add)
	}
}
