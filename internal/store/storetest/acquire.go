package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// The Acquire cases beyond tokens: rate shares (a lease may carry a share
// of the rule's rate, which the central bucket stops earning while the
// share lasts), tokens returned with a request, retries answered once, and
// consumption reports on strict rules.

func acquireRate(t *testing.T, s store.Store, req store.AcquireRequest) store.Lease {
	t.Helper()
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{req})
	if err != nil {
		t.Fatalf("Acquire(%s, want %d, rate %g): %v", req.Node, req.Want, req.WantRate, err)
	}
	return ls[0]
}

// fastRule is 1,000 tokens a second with a burst of 1,000 and a 10 s lease,
// so that a share outlives the test unless the test ends it.
func fastRule(t *testing.T, ttl time.Duration) *rules.Rule {
	return rule(t, rules.Rule{Name: "rate", Algorithm: rules.TokenBucket, Limit: 1000, Period: time.Second,
		Lease: rules.LeaseTuning{TTL: ttl}})
}

// Shares water-fill the holders' wanted rates, and a new holder gets only
// what the others' current shares leave: the sum never passes the rate.
func testShareSplit(t *testing.T, h Harness) {
	s, r := h.New(t), fastRule(t, 10*time.Second)
	req := func(node string, wantRate float64) store.AcquireRequest {
		return store.AcquireRequest{Rule: r, Key: "k", Node: node, WantRate: wantRate}
	}
	steps := []struct {
		node       string
		want, rate float64
	}{
		{"a", 800, 800}, // alone: all it asks
		{"b", 800, 200}, // fair level 500, but a holds 800 until it renews
		{"a", 800, 500}, // a renews down to the level
		{"b", 800, 500}, // b grows into what a freed
		{"c", 0, 0},     // a holder that asks for tokens only gets no share
		{"b", 100, 100}, // b's demand fell: it keeps only what it asks
		{"a", 800, 800}, // 800 + 100 fit in 1000: a gets all it asks
	}
	for i, st := range steps {
		if l := acquireRate(t, s, req(st.node, st.want)); l.Rate != st.rate {
			t.Fatalf("step %d: %s wanting %g/s got a share of %g/s, want %g/s", i, st.node, st.want, l.Rate, st.rate)
		}
	}
}

// While a share lasts the central bucket earns only the rest of the rate;
// once its holder releases, the bucket earns the whole rate again.
func testShareWithholdsRefill(t *testing.T, h Harness) {
	s, r := h.New(t), fastRule(t, 10*time.Second)
	if d := check(t, s, r, "k", 1000); !d.Allowed {
		t.Fatalf("draining check %+v", d)
	}
	if l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", WantRate: 900}); l.Rate != 900 {
		t.Fatalf("first lease %+v, want a share of 900/s", l)
	}
	h.Advance(t, 100*time.Millisecond) // 100 tokens at the full rate, 10 beyond the share
	l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "b", Want: 1000})
	if l.Granted < 10 || l.Granted >= 50 {
		t.Fatalf("granted %d after 100ms with 900 of 1000/s lent, want about 10 (at least 10, and far from the 100 of the full rate)", l.Granted)
	}
	if l.RetryAfter < 100*time.Millisecond {
		t.Fatalf("retry_after %v: at the 100/s left, 1000 tokens take seconds", l.RetryAfter)
	}
	if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: "k", Node: "a"}}); err != nil {
		t.Fatal(err)
	}
	h.Advance(t, 100*time.Millisecond)
	if l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "b", Want: 1000}); l.Granted < 100 {
		t.Fatalf("granted %d 100ms after the share was released, want at least the 100 of the full rate", l.Granted)
	}
}

// A share ends with its lease. Its holder, gone without a release, is
// absent: its fallback allowance (the rate over the 2 holders it was told of)
// is reserved, and the bucket earns the rest of the rate. (Each asks
// twice, so that each is told 2: see absentAt.)
func testShareEndsWithLease(t *testing.T, h Harness) {
	s, r := h.New(t), fastRule(t, 100*time.Millisecond)
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "b"})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a"})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "b"})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 1000, WantRate: 1000})
	if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: "k", Node: "b"}}); err != nil {
		t.Fatal(err)
	}
	h.Advance(t, 300*time.Millisecond) // 100ms lent, then at least 200ms at 1000/s less 500/s reserved
	if l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "c", Want: 1000}); l.Granted < 100 || l.Granted >= 200 {
		t.Fatalf("granted %d, want at least the 100 earned after the share ended beside the reservation, and not the 200 of the whole rate", l.Granted)

	}
}

// A bucket in debt keeps back the part of its rate that repays the debt
// within a TTL.
func testShareHeldBackByDebt(t *testing.T, h Harness) {
	s, r := h.New(t), fastRule(t, 10*time.Second)
	// Drain, then report 20 admitted in fallback: a bucket in debt lends
	// no rate, its whole rate repays the debt before anything more is
	// admitted.
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 1000})
	l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: 20, WantRate: 1000})
	if l.Rate != 0 || l.Granted != 0 {
		t.Fatalf("lease %+v with 20 tokens of debt, want no share and no token", l)
	}
	// Repaid by 30 ms of refill, the bucket lends its rate again, shared.
	h.Advance(t, 30*time.Millisecond)
	if l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "b", WantRate: 500}); l.Rate != 500 {
		t.Fatalf("share %g/s once the debt is repaid, want 500/s", l.Rate)
	}
}

// Tokens returned with an Acquire are credited before the grant.
func testAcquireReturned(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	acquire(t, s, r, "k", "a", 100, 0)
	req := store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 100, Returned: 30, Held: 100, HeldKnown: true}
	if l := acquireRate(t, s, req); l.Granted != 30 {
		t.Fatalf("granted %d after returning 30 to an empty bucket, want 30", l.Granted)
	}
	req = store.AcquireRequest{Rule: r, Key: "k", Node: "a", Returned: 1000, Held: 1000, HeldKnown: true}
	if l := acquireRate(t, s, req); l.Remaining != 100 {
		t.Fatalf("remaining %d after returning 1000, want the capacity 100", l.Remaining)
	}
}

// Windows have no steady rate to share: a wanted rate gets nothing.
func testWindowsLendNoRate(t *testing.T, h Harness) {
	s := h.New(t)
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		r := windowRule(t, alg, 100, time.Minute)
		if l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 10, WantRate: 50}); l.Rate != 0 || l.Granted != 10 {
			t.Fatalf("%s: lease %+v, want 10 tokens and no rate", alg, l)
		}
	}
}

// A request sent again with the same sequence number (its answer was lost)
// is answered again and applied once: its consumption is debited once and
// its tokens granted once.
func testAcquireIsIdempotent(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	req := store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 30, Consumed: 10, Seq: 7}
	first := acquireRate(t, s, req)
	if first.Granted != 30 || first.Remaining != 60 {
		t.Fatalf("first answer %+v, want 30 granted and 60 left (100 - 10 consumed - 30)", first)
	}
	again := acquireRate(t, s, req)
	if again.Granted != 30 || again.Remaining != 60 {
		t.Fatalf("the retry was answered %+v, want the same 30 and nothing applied twice (60 left)", again)
	}
	req.Seq = 8 // the next request is applied
	if l := acquireRate(t, s, req); l.Granted != 30 || l.Remaining != 20 {
		t.Fatalf("the next request got %+v, want 30 more and 20 left", l)
	}
	req.Seq = 0 // no sequence: every request applied
	acquireRate(t, s, req)
	if d := check(t, s, r, "k", 1); d.Allowed {
		t.Fatalf("%+v: requests without a sequence number were not applied", d)
	}
}

// An Acquire on a strict rule only reports consumption: what a node
// admitted on its fallback allowance while the allocator could not decide is
// debited, nothing is lent, and the node is not a holder.
func testStrictConsumptionIsReported(t *testing.T, h Harness) {
	s := h.New(t)
	log := rule(t, rules.Rule{Name: "sl", Algorithm: rules.SlidingLog, Limit: 10, Period: slow})
	tb := rule(t, rules.Rule{Name: "stb", Algorithm: rules.TokenBucket, Limit: 10, Period: slow, Strict: true})
	for _, r := range []*rules.Rule{log, tb} {
		l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: 7, ConsumedAge: time.Second})
		if l.Granted != 0 || l.Holders != 0 || l.Remaining != 3 {
			t.Fatalf("%s: report answered %+v, want nothing granted, no holder, 3 left", r.Algorithm, l)
		}
		if d := check(t, s, r, "k", 4); d.Allowed {
			t.Fatalf("%s: 4 allowed after 7 of 10 were reported: %+v", r.Algorithm, d)
		}
		if _, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "a", Want: 1}}); !errors.Is(err, store.ErrNotLeasable) {
			t.Fatalf("%s: a lease on a strict rule: %v, want ErrNotLeasable", r.Algorithm, err)
		}
	}
	// A log takes no more entries than its limit, and none older than its period.
	acquireRate(t, s, store.AcquireRequest{Rule: log, Key: "k2", Node: "a", Consumed: 50})
	acquireRate(t, s, store.AcquireRequest{Rule: log, Key: "k3", Node: "a", Consumed: 5, ConsumedAge: 2 * slow})
	if d := check(t, s, log, "k2", 1); d.Allowed || d.Remaining != 0 {
		t.Fatalf("a log reported 50 of 10 still admits: %+v", d)
	}
	if d := check(t, s, log, "k3", 10); !d.Allowed {
		t.Fatalf("consumption older than the period still counts: %+v", d)
	}
}
