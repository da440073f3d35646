package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Returns give back only what is unspent (docs/bounds.md, rule 3): a
// return credits at most what the node says it holds (held), what it was
// lent in its lease's life and has not given back, and what it returns;
// a return without held credits nothing.

// returnRule is the api-per-key: burst 200, 1,000 a minute (and
// the default 2 s lease TTL).
func returnRule(t *testing.T) *rules.Rule {
	return rule(t, rules.Rule{Name: "ret", Algorithm: rules.TokenBucket, Limit: 1000, Period: time.Minute, Burst: 200})
}

// heldVariants are the two ways of not holding what one returns: an
// older node that does not say, and a node that says it holds nothing.
var heldVariants = []struct {
	name  string
	known bool
}{{"held not reported", false}, {"held 0", true}}

// admissionBound is burst + rate·(T + ttl), T being at least span (a store
// on a real clock may have taken longer).
func admissionBound(r *rules.Rule, span time.Duration, began time.Time) float64 {
	return float64(r.Burst) + r.Rate()*(max(span, time.Since(began))+r.Lease.TTL).Seconds()
}

// A node that spends every token it is granted and gives back, with each
// next Acquire, the whole of its previous grant: before, each return was
// credited (the store knew only what it had lent) and the node was lent
// the burst again every 10 ms. It holds nothing, so what it admits is all
// it was granted, and it stays within the bound.
func testReturnsOnAcquireCreditOnlyUnspent(t *testing.T, h Harness) {
	for _, v := range heldVariants {
		t.Run(v.name, func(t *testing.T) {
			s, r := h.New(t), returnRule(t)
			began := time.Now()
			req := store.AcquireRequest{Rule: r, Key: "k", Node: "n", Want: r.Burst}
			l := acquireRate(t, s, req)
			granted := l.Granted
			for range 60 {
				h.Advance(t, 10*time.Millisecond)
				req.Returned, req.Held, req.HeldKnown = l.Granted, 0, v.known
				l = acquireRate(t, s, req)
				granted += l.Granted
			}
			// Nothing was unspent: nothing may be credited.
			if bound := admissionBound(r, 600*time.Millisecond, began); float64(granted) > bound {
				t.Fatalf("granted %d in 0.6 s to a node that returned its spent grants, want at most burst + rate·(T + ttl) = %.0f", granted, bound)
			}
		})
	}
}

// The same with Acquire then Release of the whole grant, 20 times.
func testReleaseCreditsOnlyUnspent(t *testing.T, h Harness) {
	for _, v := range heldVariants {
		t.Run(v.name, func(t *testing.T) {
			s, r := h.New(t), returnRule(t)
			began := time.Now()
			var granted int64
			for range 20 {
				l := acquire(t, s, r, "k", "n", r.Burst, 0)
				granted += l.Granted
				ret := store.Return{Rule: r, Key: "k", Node: "n", Tokens: l.Granted, Held: 0, HeldKnown: v.known}
				if err := s.Release(context.Background(), []store.Return{ret}); err != nil {
					t.Fatal(err)
				}
				h.Advance(t, 10*time.Millisecond)
			}
			if bound := admissionBound(r, 200*time.Millisecond, began); float64(granted) > bound {
				t.Fatalf("granted %d over 20 Acquire and Release of spent grants, want at most burst + rate·(T + ttl) = %.0f", granted, bound)
			}
		})
	}
}

// An honest node's returns are credited: what it returns, up to what it
// holds and to what it was lent; a Release's as well.
func testReturnsCreditHeld(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	give := func(returned, held int64) store.Lease {
		t.Helper()
		return acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 100,
			Returned: returned, Held: held, HeldKnown: true})
	}
	if l := give(0, 0); l.Granted != 100 {
		t.Fatalf("first lease %+v, want the 100", l)
	}
	if l := give(30, 100); l.Granted != 30 {
		t.Fatalf("granted %d after returning 30 of the 100 held, want the 30", l.Granted)
	}
	// It says it holds 20 of the 100 it was lent: it spent 80, and of the
	// 50 it returns only the 20 are credited.
	if l := give(50, 20); l.Granted != 20 {
		t.Fatalf("granted %d after returning 50 while holding 20, want 20", l.Granted)
	}
	// It now holds the 20 it was just granted, and says it holds 1,000:
	// the store knows it lent 20 since.
	if l := give(1000, 1000); l.Granted != 20 {
		t.Fatalf("granted %d after returning 1000 with 20 lent, want 20", l.Granted)
	}
	ret := store.Return{Rule: r, Key: "k", Node: "a", Tokens: 15, Held: 20, HeldKnown: true}
	if err := s.Release(context.Background(), []store.Return{ret}); err != nil {
		t.Fatal(err)
	}
	if d := check(t, s, r, "k", 1); !d.Allowed || d.Remaining != 14 {
		t.Fatalf("after a Release of 15 held: %+v, want the 15 credited (14 left after this check)", d)
	}
}
