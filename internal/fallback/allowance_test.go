package fallback

import (
	"math"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// step is one decision of an allowance at a named instant.
type step struct {
	name    string
	at      time.Duration
	nodes   int
	n       int64
	allowed bool
	retry   time.Duration // checked when not allowed
}

func run(t *testing.T, a *Allowance, r *rules.Rule, w Windows, steps []step) {
	t.Helper()
	for _, s := range steps {
		res, ok := a.Decide(r, s.nodes, w, s.at, s.n)
		if !ok {
			t.Fatalf("%s: allowance closed", s.name)
		}
		if res.Allowed != s.allowed || (!s.allowed && s.retry != 0 && res.RetryAfter != s.retry) {
			t.Fatalf("%s (at %v, %d of %d nodes): %+v, want allowed=%v retry=%v", s.name, s.at, s.n, s.nodes, res, s.allowed, s.retry)
		}
	}
}

func windowRule(t *testing.T, alg rules.Algorithm, limit int64, period time.Duration) *rules.Rule {
	r := rules.Rule{Name: "w", Algorithm: alg, Limit: limit, Period: period}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	return &r
}

// A fresh allowance is burst/N, refilled at rate/N; a shrinking fleet
// raises the rate but mints no burst.
func TestAllowanceTokenBucket(t *testing.T) {
	r := rule(t, 100, 100, time.Second)
	a := NewAllowance()
	var steps []step
	for i := range 25 {
		steps = append(steps, step{name: "burst/4", at: 0, nodes: 4, n: 1, allowed: i < 25})
	}
	steps = append(steps,
		step{"26th", 0, 4, 1, false, 40 * time.Millisecond},
		step{"t1 = 1/(rate/4)", 40 * time.Millisecond, 4, 1, true, 0},
		step{"fleet of 2, no burst", 40 * time.Millisecond, 2, 1, false, 20 * time.Millisecond},
		step{"t2 = t1 + 1/(rate/2)", 60 * time.Millisecond, 2, 1, true, 0},
		step{"a cost above burst/N", 10 * time.Second, 4, 26, false, time.Second},
	)
	run(t, a, r, Windows{}, steps)
}

// A key whose lease ended starts empty and earns only from the latest
// instant its lease could end at the store.
func TestAllowanceAfterLeaseStartsEmpty(t *testing.T) {
	r := rule(t, 100, 100, time.Second)
	t0 := 5 * time.Second
	a := AfterLease(t0, math.MinInt64, nil)
	run(t, a, r, Windows{}, []step{
		{"before the lease's end", t0 - time.Second, 4, 1, false, time.Second + 40*time.Millisecond},
		{"at the lease's end", t0, 4, 1, false, 40 * time.Millisecond},
		{"one token later", t0 + 40*time.Millisecond, 4, 1, true, 0},
		{"and no more", t0 + 40*time.Millisecond, 4, 1, false, 40 * time.Millisecond},
	})
}

func TestAllowanceRoundingToZeroDenies(t *testing.T) {
	r := rule(t, 5, 5, 15*time.Minute)
	if res, _ := NewAllowance().Decide(r, 8, Windows{}, 0, 1); res.Allowed {
		t.Fatal("5 per 15 min over 8 nodes admitted: the fleet could pass 8")
	}
	w := windowRule(t, rules.FixedWindow, 5, time.Minute)
	if res, _ := NewAllowance().Decide(w, 8, Windows{Known: true}, 0, 1); res.Allowed {
		t.Fatal("a window of 5 over 8 nodes admitted")
	}
}

// A year-long period over many nodes: no overflow, the rate never grows.
func TestAllowanceAtExtremes(t *testing.T) {
	r := rule(t, rules.MaxLimit, rules.MaxLimit, rules.MaxPeriod)
	for _, nodes := range []int{1, 292, 1 << 20, math.MaxInt32} {
		a := NewAllowance()
		capacity := r.Burst / int64(nodes)
		if res, _ := a.Decide(r, nodes, Windows{}, 0, capacity); !res.Allowed {
			t.Errorf("%d nodes: burst/N = %d refused: %+v", nodes, capacity, res)
		}
		if res, _ := a.Decide(r, nodes, Windows{}, 0, 1); res.Allowed || res.RetryAfter <= 0 {
			t.Errorf("%d nodes: past burst/N: %+v", nodes, res)
		}
	}
}

// A window rule's allowance is limit/N per store window, counted only where
// the node is sure which window it is in; it never admits in the window the
// key held a lease in, and halves while the windows' place is unknown.
func TestAllowanceWindows(t *testing.T) {
	r := windowRule(t, rules.FixedWindow, 100, time.Second)
	// The store's clock is the node's + 10.000 s to + 10.050 s: store window
	// k is certainly [k s - 10 s, (k+1) s - 10.05 s) on the node.
	w := Windows{Lo: 10 * time.Second, Hi: 10*time.Second + 50*time.Millisecond, Known: true}
	a := AfterLease(0, 12, nil) // held a lease in store window 12 = node [2 s, 3 s)
	run(t, a, r, w, []step{
		{"window 12: the lease's", 2500 * time.Millisecond, 4, 1, false, 500 * time.Millisecond},
		{"window 13 begins", 3 * time.Second, 4, 25, true, 0},
		{"window 13 spent", 3500 * time.Millisecond, 4, 1, false, 500 * time.Millisecond},
		{"between 13 and 14", 3960 * time.Millisecond, 4, 1, false, 40 * time.Millisecond},
		{"window 14", 4 * time.Second, 4, 25, true, 0},
	})
	// A grant of window 12 that arrives in window 13 (an answer replayed)
	// closes the allowance that counted 20 there: the next one goes on
	// with that count, and admits only 5 more in 13.
	b := AfterLease(0, 12, nil)
	run(t, b, r, w, []step{{"window 13, before the late grant", 3 * time.Second, 4, 20, true, 0}})
	b.Close(3100 * time.Millisecond)
	c := AfterLease(3100*time.Millisecond, 12, b)
	run(t, c, r, w, []step{
		{"window 13 after it: what is left", 3200 * time.Millisecond, 4, 5, true, 0},
		{"window 13 after it: no more", 3300 * time.Millisecond, 4, 1, false, 700 * time.Millisecond},
		{"window 14 afresh", 4 * time.Second, 4, 25, true, 0},
	})
	// A grant of window 13 itself: no fallback in 13, and 14 afresh.
	d := AfterLease(3100*time.Millisecond, 13, b)
	run(t, d, r, w, []step{
		{"the lease's window", 3200 * time.Millisecond, 4, 1, false, 800 * time.Millisecond},
		{"the next afresh", 4 * time.Second, 4, 25, true, 0},
	})
	u := NewAllowance()
	run(t, u, r, Windows{Lo: 10 * time.Second, Hi: 10 * time.Second}, []step{
		{"unknown: limit/2N", 0, 4, 12, true, 0},
		{"unknown: no more", 0, 4, 1, false, time.Second},
	})
}

// What an allowance admits is handed to reports once, put back when a
// report fails, refunded when a request does not go ahead, and closed when
// the key is served again.
func TestAllowanceConsumption(t *testing.T) {
	r := rule(t, 100, 100, time.Second)
	a := NewAllowance()
	a.Decide(r, 1, Windows{}, time.Second, 3)
	a.Decide(r, 1, Windows{}, 2*time.Second, 2)
	if n, age := a.TakeConsumed(3 * time.Second); n != 5 || age != 2*time.Second {
		t.Fatalf("took %d aged %v, want 5 aged 2s", n, age)
	}
	if n, _ := a.TakeConsumed(3 * time.Second); n != 0 {
		t.Fatalf("took %d twice", n)
	}
	a.RestoreConsumed(5, time.Second)
	a.Decide(r, 1, Windows{}, 4*time.Second, 1)
	if !a.Refund(1) {
		t.Fatal("refund refused")
	}
	if n, age := a.Close(5 * time.Second); n != 5 || age != 4*time.Second {
		t.Fatalf("closed with %d aged %v, want 5 aged 4s", n, age)
	}
	if _, ok := a.Decide(r, 1, Windows{}, 5*time.Second, 1); ok {
		t.Fatal("a closed allowance decided")
	}
}

func TestAllowancesForgetIdleKeys(t *testing.T) {
	r := rule(t, 10, 10, time.Second)
	var s Allowances
	a := s.Get(r, "a", 0)
	if s.Get(r, "a", 0) != a {
		t.Fatal("the same key gave two allowances")
	}
	s.Get(r, "b", 2*time.Minute)
	if s.Len() != 1 {
		t.Fatalf("%d allowances kept, want the idle one forgotten", s.Len())
	}
}

// A sliding log's fallback counts halved windows on the node's own clock:
// an estimate of the store's clock that moves between decisions (a node
// back from a cut, told it anew) must not start a third window within one
// period. (Limit 100 a second on one node: 50 a window.)
func TestAllowanceSlidingLogWindowsStayPut(t *testing.T) {
	r := windowRule(t, rules.SlidingLog, 100, time.Second)
	a := NewAllowance()
	ms := time.Millisecond
	for _, s := range []struct {
		name    string
		at, lo  time.Duration
		allowed bool
	}{
		{"t0: 50 at once, the store's clock unknown", 0, 0, true},
		{"t1: the estimate moves half a period on: still the node's window 0", 600 * ms, 500 * ms, false},
		{"t2: its window 1 begins", 1000 * ms, 500 * ms, true},
		{"t3: the estimate moves on again, past another window's start: still window 1", 1100 * ms, 1200 * ms, false},
	} {
		n := int64(50)
		w := Windows{Lo: s.lo, Hi: s.lo, Known: true}
		res, ok := a.Decide(r, 1, w, s.at, n)
		if !ok || res.Allowed != s.allowed {
			t.Fatalf("%s (at %v, store estimate %v on): %+v, want allowed=%v", s.name, s.at, s.lo, res, s.allowed)
		}
	}
}
