package oracle

import (
	"testing"
	"time"
)

func TestAccuracyIdeal(t *testing.T) {
	cases := []struct {
		name      string
		rule      Rule
		evs       []ev
		ideal     int64
		admitted  int64
		wantRatio float64
	}{
		// 15 offered at once: the full bucket admits 10; 0.5 s later 5
		// more have dripped in.
		{name: "token bucket", rule: fbBucket(), evs: []ev{offer(0, 15), many(0, 1, 10, Lease), offer(500*ms, 5),
			many(500*ms, 1, 2, Lease)}, ideal: 15, admitted: 12, wantRatio: 0.8},
		{name: "token bucket, a request holding its cost", rule: fbBucket(), evs: []ev{
			func(o *Oracle) {
				o.Offered(0, 1, "r", "k", 7)
				o.Offered(0, 1, "r", "k", 4)
				o.Offered(0, 1, "r", "k", 3)
			}},
			ideal: 10},
		{name: "fixed window", rule: window(FixedWindow, 5, time.Second), evs: []ev{offer(200*ms, 7), many(200*ms, 1, 5, Lease),
			offer(1200*ms, 3), many(1200*ms, 1, 3, Lease)}, ideal: 8, admitted: 8, wantRatio: 1},
		// (0, 1 s] holds the one at 0.5 s: two more fit.
		{name: "sliding log", rule: Rule{Algorithm: SlidingLog, Limit: 3, Period: time.Second},
			evs: []ev{offer(0, 2), offer(500*ms, 2), offer(time.Second, 2)}, ideal: 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := run(1, append([]ev{setRule(0, c.rule)}, c.evs...)).Finish(2 * time.Second)
			if len(rep.Violations) != 0 || !rep.Calm || len(rep.Keys) != 1 || rep.Ideal != c.ideal || rep.Admitted != c.admitted ||
				!near(rep.Ratio, c.wantRatio) || rep.Keys[0].Ideal != c.ideal {
				t.Fatalf("report %+v: want ideal %d, admitted %d, ratio %g", rep, c.ideal, c.admitted, c.wantRatio)
			}
		})
	}
}

func TestAccuracyOverKeys(t *testing.T) {
	o := New(Config{Nodes: 2})
	o.SetRule(0, Rule{Name: "w", Algorithm: FixedWindow, Limit: 5, Period: time.Second})
	for _, k := range []string{"b", "a"} {
		for range 6 {
			o.Offered(0, 1, "w", k, 1)
		}
	}
	for range 5 {
		o.Admitted(0, 0, 1, "w", "a", 1, Lease)
	}
	o.Admitted(0, 0, 1, "w", "b", 1, Lease)
	rep := o.Finish(time.Second)
	if len(rep.Keys) != 2 || rep.Keys[0].Key != "a" || rep.Keys[0].Ratio != 1 || rep.Keys[1].Ratio != 0.2 ||
		rep.Offered != 12 || rep.Ideal != 10 || rep.Ratio != 0.6 {
		t.Fatalf("report %+v", rep)
	}
	o.Fault(2*time.Second, 3*time.Second, "after")
	if rep := o.Finish(4 * time.Second); rep.Calm || rep.Faults != 1 {
		t.Fatalf("a run with a fault is not calm: %+v", rep)
	}
}

func TestFairness(t *testing.T) {
	const t0, t1, t2, end = 0, 100 * ms, time.Second, 10 * time.Second
	big := Rule{Algorithm: TokenBucket, Limit: 1000, Period: time.Second, TTL: time.Second}
	fair := func(o *Oracle) { o.ExpectFair(t0, end, "r", "k", []int{1, 2, 3}) }
	load := func(a, b, c int) []ev {
		// What node 1 admits before t0 + TTL/5 does not count.
		return []ev{setRule(0, big), fair, many(t1, 1, 100, Lease), many(t2, 1, a, Lease), many(t2, 2, b, Lease), many(t2, 3, c, Lease)}
	}
	cases := []struct {
		name         string
		evs          []ev
		judged, ok   bool
		viol         []want
		wantAdmitted []int64
	}{
		{name: "within 10% of the mean", evs: load(30, 30, 33), judged: true, ok: true, wantAdmitted: []int64{30, 30, 33}},
		{name: "past 10% of the mean", evs: load(30, 30, 35), judged: true, wantAdmitted: []int64{30, 30, 35},
			viol: []want{{inv: InvFairness, node: 3, from: 200 * ms, to: end, measured: 35 - 95.0/3, bound: 9.5 / 3}}},
		{name: "too few to judge", evs: load(10, 10, 15), wantAdmitted: []int64{10, 10, 15}},
		{name: "not calm", evs: append(load(30, 30, 35), faulty(5*time.Second, 6*time.Second)), wantAdmitted: []int64{30, 30, 35}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := run(3, c.evs)
			rep := o.Finish(end)
			f := rep.Fairness
			if len(f) != 1 || f[0].Judged != c.judged || (c.judged && f[0].Fair != c.ok) || f[0].From != 200*ms ||
				len(f[0].Admitted) != 3 || f[0].Admitted[0] != c.wantAdmitted[0] || f[0].Admitted[2] != c.wantAdmitted[2] {
				t.Fatalf("fairness %+v", f)
			}
			check(t, rep.Violations, c.viol)
			if again := o.Finish(end); len(again.Violations) != len(rep.Violations) {
				t.Fatalf("a second Finish judged again: %v", again.Violations)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	r := fbBucket()
	cases := []struct {
		name string
		evs  []ev
	}{
		{name: "an event out of order", evs: []ev{setRule(0, r), many(time.Second, 1, 1, Lease), many(0, 1, 1, Lease)}},
		{name: "a rule never set", evs: []ev{many(0, 1, 1, Lease)}},
		{name: "a rule without a period", evs: []ev{setRule(0, Rule{Algorithm: TokenBucket, Limit: 1})}},
		{name: "no mode", evs: []ev{setRule(0, r), many(0, 1, 1, 0)}},
		{name: "a grant sent after it came", evs: []ev{setRule(0, r), grant(0, ms, 1, 1, 0, time.Second)}},
		{name: "a fairness interval begun", evs: []ev{setRule(0, r), many(time.Second, 1, 1, Lease),
			func(o *Oracle) { o.ExpectFair(0, 2*time.Second, "r", "k", []int{1, 2}) }}},
		{name: "a fault ending before it begins", evs: []ev{faulty(time.Second, 0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := run(1, c.evs).Violations()
			if len(v) != 1 || v[0].Invariant != InvUsage || v[0].Detail == "" {
				t.Fatalf("want one usage violation: %v", v)
			}
		})
	}
}
