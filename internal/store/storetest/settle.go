package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Settled costs (AcquireRequest.Settled) are taken in full into a debt of
// at most the rule's max debt: not bounded by the node's fallback allowance as
// consumption is, and never past the debt.

// within reports whether d is in [lo, hi].
func within(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }

func testSettledBucketDebt(t *testing.T, h Harness) {
	s := h.New(t)
	// 100 a day, burst 100, the default debt of one burst.
	r := bucketRule(t, 100)
	acquire(t, s, r, "k", "a", 100, 0) // drained
	for _, n := range []string{"b", "c", "d"} {
		acquire(t, s, r, "k", n, 0, 0) // four holders
	}
	// 80 settled by one of four holders: consumption would be capped at its
	// part of the burst (25); a settled cost is the work's, taken whole.
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Settled: 80})
	if d := debtWait(t, s, r, "k"); !within(d, 43*time.Hour, 44*time.Hour) {
		t.Fatalf("a burst comes in %v after 80 settled on an empty bucket, want about 43.2h (a debt of 80, then 100)", d)
	}
	// More than the debt allows goes no further than the debt.
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "b", Settled: 500})
	if d := debtWait(t, s, r, "k"); !within(d, 47*time.Hour, 49*time.Hour) {
		t.Fatalf("a burst comes in %v after a debt past max_debt, want about 48h (a debt of 100, the burst, then 100)", d)
	}
	// A rule that allows no debt takes only what the bucket holds.
	none := rule(t, rules.Rule{Name: "nodebt", Algorithm: rules.TokenBucket, Limit: 100, Period: slow, MaxDebt: rules.MaxDebtOf(0)})
	acquire(t, s, none, "k", "a", 60, 0)
	acquireRate(t, s, store.AcquireRequest{Rule: none, Key: "k", Node: "a", Settled: 70})
	if d := debtWait(t, s, none, "k"); !within(d, 23*time.Hour, 25*time.Hour) {
		t.Fatalf("max_debt 0: a burst comes in %v, want about 24h (emptied, no debt)", d)
	}
}

// A retry of a request that carried a settled cost is answered again, not
// applied again: the debt is taken once.
func testSettledOnce(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	acquire(t, s, r, "k", "a", 100, 0)
	req := store.AcquireRequest{Rule: r, Key: "k", Node: "a", Settled: 30, Seq: 7}
	acquireRate(t, s, req)
	acquireRate(t, s, req)
	if d := debtWait(t, s, r, "k"); !within(d, 31*time.Hour, 32*time.Hour) {
		t.Fatalf("a burst comes in %v after 30 settled, sent twice, want about 31.2h (a debt of 30, taken once)", d)
	}
}

// A window counts a settled cost against its limit, and past it by the
// rule's debt only: none by default.
func testSettledWindow(t *testing.T, h Harness) {
	s := h.New(t)
	for _, c := range []struct {
		debt *int64
		want int64 // what the window still admits after 6 lent and 9 settled
	}{{nil, 0}, {rules.MaxDebtOf(5), 0}} {
		r := rule(t, rules.Rule{Name: "fw", Algorithm: rules.FixedWindow, Limit: 20, Period: slow, MaxDebt: c.debt})
		acquire(t, s, r, "k", "a", 6, 0)
		acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Settled: 9})
		if d := check(t, s, r, "k", 1); !d.Allowed || d.Remaining != 4 {
			t.Fatalf("debt %v: after 6 lent and 9 settled, Check = %+v, want allowed with 4 left (16 of 20 counted)", c.debt, d)
		}
		acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Settled: 100})
		if l := acquire(t, s, r, "k", "b", 5, 0); l.Granted != c.want || l.Remaining != 0 {
			t.Fatalf("debt %v: after a settled cost past the limit, lease %+v, want nothing", c.debt, l)
		}
	}
	// Past the limit by the debt: a sliding window's next window weighs it.
	r := rule(t, rules.Rule{Name: "sw", Algorithm: rules.SlidingWindow, Limit: 20, Period: slow, MaxDebt: rules.MaxDebtOf(10)})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Settled: 100})
	if d := check(t, s, r, "k", 1); d.Allowed {
		t.Fatalf("a sliding window settled past its limit admits: %+v", d)
	}
}

// A strict rule's settled cost comes in an Acquire of its own, debited as
// a leased one's is.
func testSettledStrict(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "strict", Algorithm: rules.TokenBucket, Limit: 100, Period: slow, Strict: true})
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("Check(10) = %+v", d)
	}
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Settled: 120})
	d := check(t, s, r, "k", 1)
	if d.Allowed || !within(d.RetryAfter, 7*time.Hour, 8*time.Hour) {
		t.Fatalf("after 10 checked and 120 settled, Check(1) = %+v, want refused for about 7.4h (90 left, 120 taken: a debt of 30)", d)
	}
	log := rule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 10, Period: slow, MaxDebt: rules.MaxDebtOf(3)})
	check(t, s, log, "k", 2)
	acquireRate(t, s, store.AcquireRequest{Rule: log, Key: "k", Node: "a", Settled: 50})
	if d := check(t, s, log, "k", 1); d.Allowed {
		t.Fatalf("a sliding log settled past its limit: %+v, want refused", d)
	}
}
