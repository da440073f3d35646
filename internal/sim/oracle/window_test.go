package oracle

import (
	"testing"
	"time"
)

func window(a Algorithm, limit int64, period time.Duration) Rule {
	return Rule{Algorithm: a, Limit: limit, Period: period, TTL: time.Second}
}

func TestFixedWindow(t *testing.T) {
	const t0, t1, t2, t3 = 200 * ms, 900 * ms, 950 * ms, 1500 * ms
	r := window(FixedWindow, 5, time.Second)
	w0 := want{inv: InvWindow, node: -1, from: 0, to: time.Second, store: true, measured: 6, bound: 5}
	runCases(t, []tcase{
		{name: "a store window at its limit", evs: []ev{setRule(0, r), many(t0, 1, 3, Lease), many(t1, 2, 2, Lease)}},
		{name: "past it", evs: []ev{setRule(0, r), many(t0, 1, 3, Lease), many(t1, 2, 3, Lease)}, want: []want{w0}},
		// 10 in 50 ms of true time, 5 in each of the store's windows.
		{name: "windows by the store's clock", evs: []ev{setRule(0, r), many(t1, 1, 5, Lease),
			admS(t2, time.Second, 2, 5, Lease)}},
		{name: "a store clock stepped back reopens no window", evs: []ev{setRule(0, r), many(t0, 1, 5, Lease),
			admS(t3, 800*ms, 2, 1, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 0, to: time.Second, store: true, measured: 6, bound: 5}}},
		{name: "every mode counts but unreserved fallback", evs: []ev{faulty(0, time.Second), setRule(0, r), many(t0, 1, 2, Lease),
			many(t0, 2, 2, Strict), grant(t0, t0, 3, 1, 0, time.Second), many(t1, 3, 1, Fallback), many(t1, 4, 3, Fallback)}},
		{name: "a fallback with nothing wrong counts too", evs: []ev{setRule(0, r), many(t0, 1, 2, Lease),
			many(t0, 2, 2, Strict), grant(t0, t0, 3, 1, 0, time.Second), many(t1, 3, 1, Fallback), many(t1, 4, 3, Fallback)},
			want: []want{{inv: InvWindow, node: -1, from: 0, to: time.Second, store: true, measured: 6, bound: 5}}},
	})
}

func TestWindowReload(t *testing.T) {
	const t0, t1, t2, t3 = 200 * ms, 500 * ms, 700 * ms, 1600 * ms
	five, three := window(FixedWindow, 5, time.Second), window(FixedWindow, 3, time.Second)
	twice := window(FixedWindow, 5, 2*time.Second)
	runCases(t, []tcase{
		{name: "a window spanning a reload has the larger limit", evs: []ev{setRule(0, five), many(t0, 1, 5, Lease),
			setRule(t1, three)}},
		{name: "past the larger limit", evs: []ev{setRule(0, five), many(t0, 1, 5, Lease), setRule(t1, three),
			many(t2, 1, 1, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 0, to: time.Second, store: true, measured: 6, bound: 5}}},
		// The first version's leases die by t1 + 1 s: at t3 only the new
		// limit holds.
		{name: "after the reload's lookback", evs: []ev{setRule(0, five), setRule(t1, three), many(t3, 1, 4, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: time.Second, to: 2 * time.Second, store: true, measured: 4, bound: 3}}},
		// A reload that reaches the nodes one at a time: until the last
		// has it, a node may decide under the larger limit (and spend
		// leases of it for a TTL more).
		{name: "a reload still spreading keeps the larger limit", evs: []ev{setRule(0, five), spread(t1, three),
			many(t3, 1, 5, Lease)}},
		{name: "past the larger limit while spreading", evs: []ev{setRule(0, five), spread(t1, three),
			many(t3, 1, 6, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: time.Second, to: 2 * time.Second, store: true, measured: 6, bound: 5}}},
		{name: "learned, then its lookback over", evs: []ev{setRule(0, five), spread(t1, three), learned(t2),
			many(1800*ms, 1, 4, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: time.Second, to: 2 * time.Second, store: true, measured: 4, bound: 3}}},
		{name: "learned, within its lookback", evs: []ev{setRule(0, five), spread(t1, three), learned(t2),
			many(t3, 1, 5, Lease)}},
		// Another period: windows that cannot be compared, counted afresh.
		{name: "a new period starts afresh", evs: []ev{setRule(0, five), many(t0, 1, 5, Lease), setRule(t1, twice),
			many(t2, 1, 5, Lease)}},
		{name: "past the new period's limit", evs: []ev{setRule(0, five), many(t0, 1, 5, Lease), setRule(t1, twice),
			many(t2, 1, 6, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 0, to: 2 * time.Second, store: true, measured: 6, bound: 5}}},
	})
}

func TestSlidingWindow(t *testing.T) {
	const t0, t1, t2, t3 = 100 * ms, 500 * ms, 900 * ms, 1100 * ms
	r := window(SlidingWindow, 5, time.Second)
	// The store's clock runs ahead by steps: each store window holds 5.
	spread := []ev{setRule(0, r), admS(t0, t0, 1, 5, Lease), admS(t1, 1100*ms, 2, 5, Lease)}
	runCases(t, []tcase{
		{name: "a store window past its limit", evs: []ev{setRule(0, r), many(t0, 1, 6, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 0, to: time.Second, store: true, measured: 6, bound: 5}}},
		{name: "2·l in P of true time", evs: spread},
		{name: "past 2·l in P of true time", evs: append(spread, admS(t2, 2100*ms, 3, 1, Lease)),
			want: []want{{inv: InvSlidingTwice, node: -1, from: t0, to: t2, measured: 11, bound: 10}}},
		{name: "P of true time is half-open", evs: append(spread, admS(t3, 2100*ms, 3, 5, Lease))},
	})
	// The same, the clock stepped forward at t1 (a step recorded): leases
	// of store window 0 spent after it beside two later windows, three
	// limits in P of true time, and no more.
	ahead := []ev{setRule(0, r), admS(t0, t0, 1, 5, Lease), step(t1, t1, 2100*ms), admS(t1, 2100*ms, 2, 5, Lease)}
	runCases(t, []tcase{
		{name: "a step forward: 3·l in P of true time", evs: append(ahead[:len(ahead):len(ahead)], admS(t2, 3100*ms, 3, 5, Lease))},
		{name: "past 3·l", evs: append(ahead[:len(ahead):len(ahead)], admS(t2, 3100*ms, 3, 5, Lease), admS(t2, 3100*ms, 1, 1, Lease)),
			want: []want{{inv: InvSlidingTwice, node: -1, from: t0, to: t2, measured: 16, bound: 10}}},
	})
}

func TestSlidingLog(t *testing.T) {
	r := Rule{Algorithm: SlidingLog, Limit: 3, Period: time.Second}
	full := []ev{setRule(0, r), admS(0, 0, 1, 1, Strict), admS(500*ms, 500*ms, 2, 1, Strict),
		admS(999*ms, 999*ms, 1, 1, Strict), admS(time.Second, time.Second, 2, 1, Strict)}
	stepped := []ev{setRule(0, r), admS(0, 0, 1, 1, Strict), admS(500*ms, 500*ms, 1, 1, Strict),
		admS(2*time.Second, 2*time.Second, 1, 1, Strict), admS(2100*ms, 700*ms, 1, 1, Strict)}
	runCases(t, []tcase{
		{name: "at the limit, the window half-open", evs: full},
		{name: "past it", evs: append(full, admS(1200*ms, 1200*ms, 1, 1, Strict)),
			want: []want{{inv: InvLog, node: -1, from: 500 * ms, to: 1200 * ms, store: true, measured: 4, bound: 3}}},
		{name: "by the store's clock, not true time", evs: []ev{setRule(0, r), admS(0, 0, 1, 2, Strict),
			admS(10*ms, 900*ms, 1, 1, Strict), admS(20*ms, 1900*ms, 1, 2, Strict), admS(30*ms, 2800*ms, 1, 1, Strict)}},
		{name: "the store's clock stepped back", evs: stepped},
		{name: "past it after the store's clock stepped back", evs: append(stepped, admS(2200*ms, 800*ms, 1, 1, Strict)),
			want: []want{{inv: InvLog, node: -1, from: 0, to: 800 * ms, store: true, measured: 4, bound: 3}}},
		// Told of the step (2 s back to 0.7 s), the periods it spans may
		// take twice the limit: the store dropped the entries before 1 s
		// at 2 s, and cannot count them after the step.
		{name: "past it after a step the oracle is told of", evs: append(append([]ev{}, stepped[:4]...),
			step(2100*ms, 2*time.Second, 700*ms), stepped[4], admS(2200*ms, 800*ms, 1, 1, Strict))},
		{name: "a window after the point stepped back", evs: append(stepped, admS(2200*ms, 600*ms, 1, 1, Strict)),
			// The windows holding 0.6 s: (−0.4 s, 0.6 s] holds 3, (−0.3 s,
			// 0.7 s] holds 4.
			want: []want{{inv: InvLog, node: -1, from: 0, to: 700 * ms, store: true, measured: 4, bound: 3}}},
	})
}

func TestSlidingLogBeyondHorizon(t *testing.T) {
	r := Rule{Algorithm: SlidingLog, Limit: 3, Period: time.Second}
	o := run(1, []ev{setRule(0, r), admS(0, 0, 1, 3, Strict), admS(time.Second, 9500*ms, 1, 1, Strict),
		admS(2*time.Second, 500*ms, 1, 1, Strict)})
	rep := o.Finish(3 * time.Second)
	if len(rep.Violations) != 0 || rep.Checked.BeyondHorizon != 1 {
		t.Fatalf("a store clock stepped back 9 s, past the 8 s kept: %v, beyond %d", rep.Violations, rep.Checked.BeyondHorizon)
	}
}
