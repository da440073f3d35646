package oracle

import (
	"testing"
	"time"
)

// A token bucket of 10 per second, burst 10. With a 100 ms TTL its fleet
// bound is 11 + 10·T and binds before its calm second's 21; with a 1 s TTL
// it is 20 + 10·T and the calm second binds first.
func bucket(ttl time.Duration) Rule {
	return Rule{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 10, TTL: ttl}
}

func TestBucketBound(t *testing.T) {
	const t0, t1 = 0, 500 * ms
	r := bucket(100 * ms)
	runCases(t, []tcase{
		{name: "one instant at the bound", evs: []ev{setRule(t0, r), many(t0, 1, 11, Lease)}},
		{name: "one instant past it", evs: []ev{setRule(t0, r), many(t0, 1, 12, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: t0, to: t0, measured: 12, bound: 11}}},
		{name: "a window at the bound", evs: []ev{setRule(t0, r), many(t0, 1, 11, Lease), many(t1, 2, 5, Lease)}},
		{name: "a window past it", evs: []ev{setRule(t0, r), many(t0, 1, 11, Lease), many(t1, 2, 6, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: t0, to: t1, measured: 17, bound: 16}}},
		{name: "every mode counts but unreserved fallback", evs: []ev{faulty(0, time.Second), setRule(t0, r),
			many(t0, 1, 5, Lease), many(t0, 2, 5, Strict), grant(t0, t0, 3, 1, 0, time.Second), many(t0, 3, 1, Fallback),
			many(t0, 4, 3, Fallback)}},
		{name: "a fallback with nothing wrong counts too", evs: []ev{setRule(t0, r),
			many(t0, 1, 5, Lease), many(t0, 2, 5, Strict), grant(t0, t0, 3, 1, 0, time.Second), many(t0, 3, 1, Fallback),
			many(t0, 4, 3, Fallback)},
			want: []want{{inv: InvBucket, node: -1, from: t0, to: t0, measured: 12, bound: 11}}},
	})
}

func TestBucketEpisodeFolds(t *testing.T) {
	// The fault keeps the calm second out of it.
	o := run(1, []ev{faulty(0, 2*time.Second), setRule(0, bucket(100*ms)), many(0, 1, 14, Lease),
		many(time.Second, 1, 1, Lease), many(time.Second, 1, 30, Lease)})
	v := o.Violations()
	// At 0 s the 12th to 14th break 11; at 1 s the one passes (15 ≤ 21),
	// then [0 s, 1 s] breaks from its 7th more (22 > 21) to its 30th.
	if len(v) != 2 || v[0].Repeats != 2 || v[1].Repeats != 23 || v[1].Measured != 22 || v[1].Bound != 21 {
		t.Fatalf("want two episodes, of 3 and 24 breaches: %v", v)
	}
	if n := len(v[0].Trace); n != 12 || v[0].Trace[n-1] != "0s node 1 admitted 1 (lease, store 0s)" {
		t.Fatalf("trace of the first breach: %q", v[0].Trace)
	}
}

func TestBucketReload(t *testing.T) {
	const t0, t1, t2, t3 = 0, 10 * time.Second, 10050 * ms, 10500 * ms
	big, small := bucket(100*ms), bucket(100*ms)
	big.Burst = 30
	runCases(t, []tcase{
		// Leases of the first version (burst 30) may be spent until
		// t1 + 100 ms: at t2 the bound is 30 + 10·0.1.
		{name: "before the reload's lookback ends", evs: []ev{setRule(t0, big), setRule(t1, small), many(t2, 1, 31, Lease)}},
		{name: "past the larger bound", evs: []ev{setRule(t0, big), setRule(t1, small), many(t2, 1, 32, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: t2, to: t2, measured: 32, bound: 31}}},
		// [t2, t3] spans the reload: 30 + 10·(0.45 + 0.1) = 35.5.
		{name: "a window spanning the reload", evs: []ev{setRule(t0, big), setRule(t1, small), many(t2, 1, 31, Lease),
			many(t3, 1, 4, Lease)}},
		{name: "past a window spanning the reload", evs: []ev{setRule(t0, big), setRule(t1, small), many(t2, 1, 31, Lease),
			many(t3, 1, 5, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: t2, to: t3, measured: 36, bound: 35.5}}},
		// At t3 alone only the new version counts: 10 + 10·0.1.
		{name: "after the lookback", evs: []ev{setRule(t0, big), setRule(t1, small), many(t3, 1, 12, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: t3, to: t3, measured: 12, bound: 11}}},
		// A raised rate holds the windows spanning the reload to it: the
		// instant alone binds at 10 + 100·0.1 = 20, not 10 + 10·0.1.
		{name: "a raised rate", evs: []ev{setRule(t0, small), many(t0, 1, 11, Lease), many(time.Second, 1, 10, Lease),
			setRule(1500*ms, Rule{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 10, TTL: 100 * ms}),
			many(1550*ms, 1, 21, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: 1550 * ms, to: 1550 * ms, measured: 21, bound: 20}}},
	})
}

func TestBucketSecond(t *testing.T) {
	const t0, t1, t2 = 0, time.Second, time.Second + ms
	r := bucket(time.Second)
	// b + 1.1·r + 2: one node, its capped token and one it may carry in a fraction.
	past := []ev{setRule(t0, r), many(t0, 1, 15, Lease), many(t1, 2, 9, Lease)}
	second := want{inv: InvBucketSecond, node: -1, from: t0, to: t1, measured: 24, bound: 23}
	runCases(t, []tcase{
		{name: "at the bound", evs: []ev{setRule(t0, r), many(t0, 1, 15, Lease), many(t1, 2, 8, Lease)}},
		{name: "past it", evs: past, want: []want{second}},
		{name: "the second's ends both count, not beyond", evs: []ev{setRule(t0, r), many(t0, 1, 15, Lease), many(t2, 2, 9, Lease)}},
		{name: "a fault far away", evs: append([]ev{faulty(5*time.Second, 6*time.Second)}, past...), want: []want{second}},
		// The excuse is [from − L, to + L) = [0.5 s, 3 s).
		{name: "not calm: a fault recorded before", evs: append([]ev{faulty(1500*ms, 2*time.Second)}, past...)},
		{name: "not calm: a fault recorded after", evs: append(past, faulty(1500*ms, 2*time.Second))},
		{name: "not calm: a fault ended less than L before",
			evs: []ev{faulty(1500*ms, 2100*ms), setRule(t0, r), many(3*time.Second, 1, 15, Lease), many(4*time.Second, 2, 9, Lease)}},
		{name: "calm: a fault ended L before",
			evs:  []ev{faulty(1500*ms, 2*time.Second), setRule(t0, r), many(3*time.Second, 1, 15, Lease), many(4*time.Second, 2, 9, Lease)},
			want: []want{{inv: InvBucketSecond, node: -1, from: 3 * time.Second, to: 4 * time.Second, measured: 24, bound: 23}}},
	})
}

// A calm breach excused by a fault gives its episode's place to the next
// breach of the episode, which the fault does not excuse.
func TestBucketSecondEpisodeAfterExcuse(t *testing.T) {
	const t0, t1, t2 = 10 * time.Second, 11 * time.Second, 11900 * ms
	o := run(1, []ev{setRule(0, bucket(time.Second)), many(t0, 1, 15, Lease), many(t1, 2, 9, Lease)})
	// Excuses the 1-s windows starting in [6 s, 10.4 s): [t0, t1], not
	// [t1, t2].
	o.Fault(8*time.Second, 9400*ms, "late")
	admS(t2, t2, 3, 15, Lease)(o) // [t1, t2] holds 24 > 23; the fleet's [t0, t2] 39 ≤ 39
	check(t, o.Violations(), []want{{inv: InvBucketSecond, node: -1, from: t1, to: t2, measured: 24, bound: 23}})
}
