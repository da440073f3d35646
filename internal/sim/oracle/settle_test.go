package oracle

import (
	"testing"
	"time"
)

// settling is r settling its requests with a debt of d.
func settling(r Rule, d int64) Rule {
	r.Settles, r.MaxDebt, r.MaxDebtSet = true, d, true
	return r
}

func settled(at time.Duration, node int, n int64, m Mode) ev {
	return func(o *Oracle) { o.Settled(at, at, node, "r", "k", n, m) }
}

func owes(at time.Duration, node int, n int64) ev {
	return func(o *Oracle) { o.Owes(at, node, "r", "k", n) }
}

func undone(at time.Duration, node int, n int64) ev {
	return func(o *Oracle) { o.Undone(at, node, "r", "k", n) }
}

// What a request's work cost above its estimate counts as admitted when it
// is settled, against the bounds plus the rule's debt D: b + r·(T + L) + D
// for a token bucket, l + D for a store window.
func TestSettledCosts(t *testing.T) {
	const t0, t1 = 0, 500 * ms
	b := settling(bucket(100*ms), 5) // b 10, r 10/s, L 100 ms: 11 at an instant, 16 with D
	w := settling(window(FixedWindow, 5, time.Second), 3)
	usage := want{inv: InvUsage, node: -1}
	runCases(t, []tcase{
		{name: "a bucket settled at its bound and D", evs: []ev{setRule(t0, b), many(t0, 1, 11, Lease), settled(t0, 1, 5, Lease)}},
		{name: "a bucket settled past them", evs: []ev{setRule(t0, b), many(t0, 1, 11, Lease), settled(t0, 1, 6, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: t0, to: t0, measured: 17, bound: 16}}},
		{name: "a strict rule's and a fallback's settlements count too", evs: []ev{setRule(t0, b), many(t0, 1, 11, Lease),
			settled(t0, 2, 3, Strict), settled(t0, 3, 3, Fallback)},
			want: []want{{inv: InvBucket, node: -1, from: t0, to: t0, measured: 17, bound: 16}}},
		{name: "a window settled at its limit and D", evs: []ev{setRule(0, w), many(t1, 1, 5, Lease), settled(t1, 1, 3, Lease)}},
		{name: "a window settled past them", evs: []ev{setRule(0, w), many(t1, 1, 5, Lease), settled(t1, 1, 4, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 0, to: time.Second, store: true, measured: 9, bound: 8}}},
		{name: "a rule that does not settle carries no D", evs: []ev{setRule(t0, bucket(100*ms)), many(t0, 1, 11, Lease),
			settled(t0, 1, 1, Lease)}, want: []want{usage}},
		// The bounds with D hold while the callers owe at most D at once.
		{name: "callers owing D at once", evs: []ev{setRule(t0, b), owes(t0, 1, 3), owes(t0, 2, 2), owes(t1, 1, -3), owes(t1, 2, 3)}},
		{name: "callers owing more than D at once", evs: []ev{setRule(t0, b), owes(t0, 1, 3), owes(t0, 2, 3)}, want: []want{usage}},
	})
}

// Tokens a lease took back when the work cost less than its estimate are
// held unspent again, and may be returned.
func TestUndone(t *testing.T) {
	const t0, t1, t2, t3 = 50 * ms, 100 * ms, 300 * ms, 600 * ms
	r := settling(fbBucket(), 10)
	spent := []ev{setRule(0, r), grant(t1, t0, 1, 10, 0, time.Second), many(t2, 1, 10, Lease)}
	runCases(t, []tcase{
		{name: "a return of what the lease took back", evs: append(spent, undone(t2, 1, 4), ret(t3, 1, 5))},
		{name: "a return past it", evs: append(spent, undone(t2, 1, 4), ret(t3, 1, 6)),
			want: []want{{inv: InvReturns, node: 1, from: 0, to: t3, measured: 6, bound: 5}}},
		{name: "without it, nothing held", evs: append(spent, ret(t3, 1, 2)),
			want: []want{{inv: InvReturns, node: 1, from: 0, to: t3, measured: 2, bound: 1}}},
		{name: "more taken back than was spent", evs: append(spent, undone(t2, 1, 11)), want: []want{{inv: InvUsage, node: -1}}},
	})
}
