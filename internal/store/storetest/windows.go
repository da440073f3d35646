package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// The windows' leases: a fixed window's tokens end with it, its returns
// count only in it, and a sliding window weighs the previous one.

func windowRule(t *testing.T, alg rules.Algorithm, limit int64, period time.Duration) *rules.Rule {
	return rule(t, rules.Rule{Name: "w", Algorithm: alg, Limit: limit, Period: period,
		Lease: rules.LeaseTuning{TTL: min(period, rules.MaxLeaseTTL)}})
}

func testFixedWindowLease(t *testing.T, h Harness) {
	s := h.New(t)
	r := windowRule(t, rules.FixedWindow, 50, slow)
	l := acquire(t, s, r, "k", "n", 30, 0)
	if l.Granted != 30 || l.Remaining != 20 || l.Epoch == 0 {
		t.Fatalf("lease %+v, want 30 granted, 20 remaining, an epoch", l)
	}
	if l.TTL <= 0 || l.TTL > slow {
		t.Fatalf("ttl %v must end with the window", l.TTL)
	}
	l2 := acquire(t, s, r, "k", "n", 30, 0)
	if l2.Granted != 20 {
		t.Fatalf("granted %d, want the window's last 20", l2.Granted)
	}
	if l2.RetryAfter <= 0 || l2.RetryAfter > slow {
		t.Fatalf("retry_after %v, want the time to the window's end", l2.RetryAfter)
	}
	ret := []store.Return{{Rule: r, Key: "k", Node: "n", Tokens: 5, Epoch: l.Epoch, Held: 50, HeldKnown: true}}
	if err := s.Release(context.Background(), ret); err != nil {
		t.Fatal(err)
	}
	if l3 := acquire(t, s, r, "k", "n", 30, 0); l3.Granted != 5 {
		t.Fatalf("granted %d after returning 5 in the same window, want 5", l3.Granted)
	}
}

// A sliding window's lease ends with its window too: spent in the next
// window, its tokens would come on top of what the store lends there.
func testSlidingWindowLease(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "w", Algorithm: rules.SlidingWindow, Limit: 50, Period: slow,
		Lease: rules.LeaseTuning{TTL: min(2*slow, rules.MaxLeaseTTL)}})
	l := acquire(t, s, r, "k", "n", 30, 0)
	if l.Granted != 30 || l.TTL <= 0 || l.TTL > slow {
		t.Fatalf("lease %+v, want 30 granted for at most the window's rest (%v)", l, slow)
	}
}

func testFixedWindowOldReturn(t *testing.T, h Harness) {
	s := h.New(t)
	const period = 100 * time.Millisecond
	r := windowRule(t, rules.FixedWindow, 10, period)
	old := acquire(t, s, r, "k", "n", 10, 0)
	h.Advance(t, period)
	cur := acquire(t, s, r, "k", "n", 4, 0)
	if cur.Epoch <= old.Epoch {
		t.Fatalf("epoch %d did not move past %d", cur.Epoch, old.Epoch)
	}
	ret := []store.Return{{Rule: r, Key: "k", Node: "n", Tokens: 10, Epoch: old.Epoch, Held: 10, HeldKnown: true}}
	if err := s.Release(context.Background(), ret); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, s, r, "k", "n", 100, 0)
	if l.Epoch == cur.Epoch && l.Granted != 6 {
		t.Fatalf("granted %d in the window after a stale return, want 6: tokens of an ended window must not be credited", l.Granted)
	}
}

func testSlidingWindow(t *testing.T, h Harness) {
	s := h.New(t)
	r := windowRule(t, rules.SlidingWindow, 10, slow)
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("first 10 refused: %+v", d)
	}
	d := check(t, s, r, "k", 1)
	if d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("11th in the window: %+v, want refused with retry_after", d)
	}
	if l := acquire(t, s, r, "k", "n", 5, 0); l.Granted != 0 {
		t.Fatalf("lease of %d from a full sliding window", l.Granted)
	}
}
