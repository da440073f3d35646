package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// The token bucket's grants, debits, releases and refills.

func testBucketGrants(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	if l := acquire(t, s, r, "k", "n1", 30, 0); l.Granted != 30 || l.Remaining != 70 || l.Holders != 1 {
		t.Fatalf("first lease %+v, want granted 30, remaining 70, holders 1", l)
	}
	l := acquire(t, s, r, "k", "n1", 100, 0)
	if l.Granted != 70 || l.Remaining != 0 {
		t.Fatalf("second lease %+v, want the 70 left", l)
	}
	if l.RetryAfter <= 0 {
		t.Fatalf("short grant without retry_after: %+v", l)
	}
	if l.TTL != r.Lease.TTL {
		t.Fatalf("ttl %v, want the rule's %v", l.TTL, r.Lease.TTL)
	}
	if l := acquire(t, s, r, "k", "n1", 5, 0); l.Granted != 0 {
		t.Fatalf("empty bucket granted %d", l.Granted)
	}
}

func testBucketConsumed(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	if l := acquire(t, s, r, "k", "n1", 0, 30); l.Granted != 0 || l.Remaining != 70 {
		t.Fatalf("report of 30 consumed: %+v, want remaining 70", l)
	}
	if l := acquire(t, s, r, "k", "n1", 100, 0); l.Granted != 70 {
		t.Fatalf("granted %d after 30 consumed, want 70", l.Granted)
	}
}

func testBucketDebt(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	// Each report stops at the node's fallback allowance (the capacity over
	// the holders, the reporter counted): a node alone empties the bucket.
	acquire(t, s, r, "k", "n1", 0, 1_000_000)
	if d := debtWait(t, s, r, "k"); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("100 tokens come in %v after one node's report of a million, want about 24h: the report stops at its share", d)
	}
	// More nodes report, each up to its share of the capacity over the
	// holders it joins (34, 25, 20 and 17 of 100): 96 owed, and 100 more
	// tokens take about two days at 100 a day.
	for _, n := range []string{"n2", "n3", "n4", "n5"} {
		acquire(t, s, r, "k", n, 0, 1_000_000)
	}
	if d := debtWait(t, s, r, "k"); d < 47*time.Hour || d > 49*time.Hour {
		t.Fatalf("100 tokens come in %v after reports of millions, want about 48h: each report must stop at its share", d)
	}
}

// debtWait is how long 100 tokens of the key take to come, asked by a
// node that holds nothing: the debt shows in it (100 a day, slow).
func debtWait(t *testing.T, s store.Store, r *rules.Rule, key string) time.Duration {
	t.Helper()
	l := acquire(t, s, r, key, "observer", 100, 0)
	if l.Granted != 0 {
		t.Fatalf("a bucket in debt granted %d", l.Granted)
	}
	return l.RetryAfter
}

// A window takes the consumption that began in it, and drops what began in
// a window that has ended: before, consumption a window old was charged to
// the current window, up to its limit.
func testOldConsumption(t *testing.T, h Harness) {
	s := h.New(t)
	report := func(r *rules.Rule, key string, age time.Duration) {
		t.Helper()
		req := []store.AcquireRequest{{Rule: r, Key: key, Node: "n1", Consumed: 1_000_000, ConsumedAge: age}}
		if _, err := s.Acquire(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	give := func(r *rules.Rule, key string, n, epoch int64) {
		t.Helper()
		if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: key, Node: "n1", Tokens: n, Epoch: epoch, Held: n, HeldKnown: true}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		w := windowRule(t, alg, 50, slow)
		l0 := acquire(t, s, w, "old", "n1", 10, 0)
		report(w, "old", slow+time.Hour)
		give(w, "old", 10, l0.Epoch) // the 10 it was lent
		if l := acquire(t, s, w, "old", "n1", 50, 0); l.Epoch == l0.Epoch && l.Granted != 50 {
			t.Fatalf("%s: granted %d of 50 in a window after consumption that began in an ended one, want all 50: it is dropped", alg, l.Granted)
		}
		// Consumption of this window counts in it, up to the ceiling of 2x.
		req := []store.AcquireRequest{{Rule: w, Key: "new", Node: "n1", Consumed: 20, ConsumedAge: time.Millisecond}}
		if _, err := s.Acquire(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if l := acquire(t, s, w, "new", "n1", 50, 0); l.Granted != 30 {
			t.Fatalf("%s: granted %d of 50 after 20 consumed a millisecond ago, want 30", alg, l.Granted)
		}
	}
}

// A node that returns more than it was lent, whatever it says it holds,
// gets back no more than it was lent.
func testBucketRelease(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	acquire(t, s, r, "k", "n1", 50, 0)
	ret := []store.Return{{Rule: r, Key: "k", Node: "n1", Tokens: 80, Held: 80, HeldKnown: true}}
	if err := s.Release(context.Background(), ret); err != nil {
		t.Fatal(err)
	}
	if d := check(t, s, r, "k", 1); d.Remaining != 99 {
		t.Fatalf("remaining %d after over-return, want 99: credit is capped at what was lent, and at capacity", d.Remaining)
	}
}

func testBucketRefills(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "fast", Algorithm: rules.TokenBucket, Limit: 100, Period: time.Second, Burst: 10})
	if l := acquire(t, s, r, "k", "n1", 10, 0); l.Granted != 10 {
		t.Fatalf("granted %d, want the burst 10", l.Granted)
	}
	h.Advance(t, 50*time.Millisecond) // 5 tokens at 100/s
	l := acquire(t, s, r, "k", "n1", 10, 0)
	if l.Granted < 5 {
		t.Fatalf("granted %d after 50ms at 100/s, want at least 5", l.Granted)
	}
	h.Advance(t, time.Second)
	if l := acquire(t, s, r, "k", "n1", 100, 0); l.Granted != 10 {
		t.Fatalf("granted %d after a long idle, want the capacity 10 and no more", l.Granted)
	}
}

func testBucketTinyRate(t *testing.T, h Harness) {
	s := h.New(t)
	// A burst of a million at one token a year: refilling the bucket takes
	// ~3e19 µs, more than an int64 holds. The state must still expire late,
	// not wrap around to "already expired" and come back full.
	r := rule(t, rules.Rule{Name: "tiny", Algorithm: rules.TokenBucket, Limit: 1, Period: rules.MaxPeriod, Burst: 1_000_000})
	if l := acquire(t, s, r, "k", "n", 1_000_000, 0); l.Granted != 1_000_000 {
		t.Fatalf("first lease %+v, want the burst", l)
	}
	if l := acquire(t, s, r, "k", "n", 1_000_000, 0); l.Granted != 0 || l.RetryAfter <= 0 {
		t.Fatalf("lease from the emptied bucket %+v, want nothing and a positive retry_after", l)
	}
	if d := check(t, s, r, "k", 1); d.Allowed || d.RetryAfter <= 0 || d.ResetAfter <= 0 {
		t.Fatalf("check on the emptied bucket %+v, want refused with positive retry_after and reset_after", d)
	}
}
