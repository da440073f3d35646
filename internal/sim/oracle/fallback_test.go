package oracle

import (
	"testing"
	"time"
)

// A token bucket of 10 per second, burst 10, 1 s TTL, 5 s absence, on two
// nodes: the fleet's bound is 20 + 10·T; one node's unreserved fallback's
// is ⌈10/2⌉ + 1 + 5·T = 6 + 5·T.
func fbBucket() Rule {
	return Rule{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 10, TTL: time.Second, Absence: 5 * time.Second}
}

// cutOff is a fault over the whole of a fallback test: the nodes are cut
// off from the allocator, which is when an unreserved fallback has its
// excuse.
var cutOff = faulty(0, time.Hour)

func TestFallbackReserved(t *testing.T) {
	const t0, t1, t2 = 0, 400 * ms, 800 * ms
	r := fbBucket()
	strict := r
	strict.Strict = true
	node := func(from, to time.Duration, measured, bound float64) want {
		return want{inv: InvFallbackBucket, node: 1, from: from, to: to, measured: measured, bound: bound}
	}
	runCases(t, []tcase{
		{name: "unreserved at its bound", nodes: 2, evs: []ev{cutOff, setRule(t0, r), many(t0, 1, 6, Fallback)}},
		{name: "unreserved past it", nodes: 2, evs: []ev{cutOff, setRule(t0, r), many(t0, 1, 7, Fallback)},
			want: []want{node(t0, t0, 7, 6)}},
		{name: "unreserved over time", nodes: 2, evs: []ev{cutOff, setRule(t0, r), many(t0, 1, 6, Fallback), many(t1, 1, 2, Fallback)}},
		{name: "unreserved over time past it", nodes: 2, evs: []ev{cutOff, setRule(t0, r), many(t0, 1, 6, Fallback), many(t1, 1, 3, Fallback)},
			want: []want{node(t0, t1, 9, 8)}},
		{name: "unreserved is left out of the fleet's sum", nodes: 2, evs: []ev{cutOff, setRule(t0, r), many(t0, 2, 20, Lease),
			many(t0, 1, 6, Fallback)}},
		{name: "reserved counts in the fleet's sum", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 1, 0, time.Second),
			many(t1, 2, 20, Lease), many(t1, 1, 1, Fallback)},
			want: []want{{inv: InvBucket, node: -1, from: t1, to: t1, measured: 21, bound: 20}}},
		{name: "reserved is not held to the node's bound", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 1, 0, time.Second),
			many(t1, 1, 7, Fallback)}},
		{name: "a share alone reserves", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 0, 2.5, time.Second),
			many(t1, 1, 7, Fallback)}},
		{name: "a grant of nothing does not", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 0, 0, time.Second),
			many(t1, 1, 7, Fallback)},
			want: []want{node(t1, t1, 7, 6)}},
		{name: "released: unreserved again", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 1, 0, time.Second),
			rel(t1, 1), many(t2, 1, 7, Fallback)},
			want: []want{node(t2, t2, 7, 6)}},
		{name: "granted again after the release", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 1, 0, time.Second),
			rel(t1, 1), grant(t2, t1, 1, 1, 0, time.Second), many(t2, 1, 7, Fallback)}},
		// The lease ends at t0 + 1 s; the store keeps it 5 s more.
		{name: "within absence of the lease's end", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 1, 0, time.Second),
			many(6*time.Second, 1, 7, Fallback)}},
		{name: "past absence", nodes: 2, evs: []ev{cutOff, setRule(t0, r), grant(t0, t0, 1, 1, 0, time.Second),
			many(6*time.Second+ms, 1, 7, Fallback)},
			want: []want{node(6*time.Second+ms, 6*time.Second+ms, 7, 6)}},
		// A fault over [0, 1 s) with a 1 s TTL excuses until 2 s; a call
		// sent into it that times out 3 s later falls back until 4 s.
		{name: "after the fault's excuse: counted in the fleet's sum", nodes: 2, evs: []ev{faulty(0, time.Second),
			setRule(t0, strict), many(2500*ms, 1, 7, Fallback)}},
		{name: "within a call timeout of it: unreserved", nodes: 2, callTimeout: 3 * time.Second,
			evs:  []ev{faulty(0, time.Second), setRule(t0, strict), many(2500*ms, 1, 7, Fallback)},
			want: []want{node(2500*ms, 2500*ms, 7, 6)}},
		{name: "a strict rule has no holders", nodes: 2, evs: []ev{cutOff, setRule(t0, strict), grant(t0, t0, 1, 1, 0, time.Second),
			many(t1, 1, 7, Fallback)},
			want: []want{node(t1, t1, 7, 6)}},
	})
}

func TestFallbackWindows(t *testing.T) {
	const t0, t1, t2 = 0, 900 * ms, time.Second
	fixed := window(FixedWindow, 5, time.Second)
	log := Rule{Algorithm: SlidingLog, Limit: 3, Period: time.Second}
	runCases(t, []tcase{
		// ⌈5/2⌉ = 3 per store window, per node.
		{name: "a window at ⌈l/N⌉ per node", nodes: 2, evs: []ev{cutOff, setRule(0, fixed), many(t0, 1, 3, Fallback),
			many(t1, 2, 3, Fallback)}},
		{name: "a window past it", nodes: 2, evs: []ev{cutOff, setRule(0, fixed), many(t0, 1, 3, Fallback), many(t1, 1, 1, Fallback)},
			want: []want{{inv: InvFallbackWindow, node: 1, from: 0, to: time.Second, store: true, measured: 4, bound: 3}}},
		{name: "the next window", nodes: 2, evs: []ev{cutOff, setRule(0, fixed), many(t0, 1, 3, Fallback), many(t2, 1, 3, Fallback)}},
		// A log has no holders: ⌈3/2⌉ = 2 in any P of true time, per node.
		{name: "a log at ⌈l/N⌉ per node", nodes: 2, evs: []ev{cutOff, setRule(0, log), grant(t0, t0, 1, 1, 0, time.Second),
			many(t0, 1, 2, Fallback), many(t2, 1, 2, Fallback)}},
		{name: "a log past it", nodes: 2, evs: []ev{cutOff, setRule(0, log), many(t0, 1, 2, Fallback), many(t1, 1, 1, Fallback)},
			want: []want{{inv: InvFallbackLog, node: 1, from: t0, to: t1, measured: 3, bound: 2}}},
	})
}

func TestFailClosed(t *testing.T) {
	const t0, t1, t2 = 0, 400 * ms, 800 * ms
	closed, open := fbBucket(), fbBucket()
	closed.FailClosed = true
	runCases(t, []tcase{
		{name: "leases and strict decisions", evs: []ev{setRule(t0, closed), many(t0, 1, 2, Lease), many(t1, 2, 1, Strict)}},
		{name: "a fallback admission", evs: []ev{setRule(t0, closed), many(t0, 1, 2, Lease), many(t1, 1, 1, Fallback)},
			want: []want{{inv: InvClosed, node: 1, from: t1, to: t1, measured: 1, bound: 0}}},
		{name: "reloaded open", evs: []ev{setRule(t0, closed), setRule(t1, open), many(t2, 1, 1, Fallback)}},
	})
}

func TestReturns(t *testing.T) {
	const t0, t1, t2, t3, t4 = 50 * ms, 100 * ms, 300 * ms, 600 * ms, 2 * time.Second
	r := fbBucket()
	over := func(at time.Duration, measured, bound float64) want {
		return want{inv: InvReturns, node: 1, from: 0, to: at, measured: measured, bound: bound}
	}
	tokens := []ev{setRule(0, r), grant(t1, t0, 1, 10, 0, time.Second), many(t2, 1, 3, Lease), ret(t3, 1, 8)}
	// A share of 10/s from t1 until t0 + 1 s.
	share := []ev{setRule(0, r), grant(t1, t0, 1, 0, 10, time.Second)}
	runCases(t, []tcase{
		{name: "granted less spent", evs: tokens},
		{name: "a return above what was held", evs: append(tokens, ret(t3, 1, 1)), want: []want{over(t3, 9, 8)}},
		{name: "another node's spending is not this one's", evs: append(tokens, many(t3, 2, 5, Lease))},
		{name: "fallback spending is not the lease's", evs: append([]ev{setRule(0, r), grant(t1, t0, 1, 10, 0, time.Second),
			many(t2, 1, 3, Fallback)}, ret(t3, 1, 11))},
		// The share counts in full from its delivery: 10·0.95 = 9.5.
		{name: "a share earnable in its lease", evs: append(share, ret(t3, 1, 10))},
		{name: "past a share earnable in its lease", evs: append(share, ret(t3, 1, 11)), want: []want{over(t3, 11, 10.5)}},
		{name: "a share replaced by the next grant", evs: append(share, grant(t2, t1, 1, 0, 0, time.Second), ret(t4, 1, 3))},
		{name: "past a replaced share", evs: append(share, grant(t2, t1, 1, 0, 0, time.Second), ret(t4, 1, 4)),
			want: []want{over(t4, 4, 3)}},
		{name: "shares add up", evs: append(share, grant(t2, t1, 1, 0, 5, time.Second), ret(t4, 1, 7))},
		{name: "past shares added up", evs: append(share, grant(t2, t1, 1, 0, 5, time.Second), ret(t4, 1, 8)),
			want: []want{over(t4, 8, 7)}},
		{name: "a release does not end the share's account", evs: append(share, rel(t2, 1), ret(t4, 1, 10))},
		{name: "nothing held: the rounding token", evs: []ev{setRule(0, r), ret(t1, 1, 1)}},
		{name: "nothing held", evs: []ev{setRule(0, r), ret(t1, 1, 2)}, want: []want{over(t1, 2, 1)}},
	})
}
