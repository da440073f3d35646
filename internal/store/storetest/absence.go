package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Absent holders (docs/bounds.md, rule 4): a holder whose lease ended
// without a release is kept for an absence, its fallback allowance reserved,
// and what it reports having admitted on it is covered by the reservation
// when it comes back. These tests count exact instants: fake clock only.

// absentAt leaves node "a" absent on key of r from its lease's end, told
// of 2 holders in its last lease (so its fallback allowance is a half), and
// the key with no other holder: "b" came first and released. Each asks
// twice, so that each is told 2 (b, first, is told 1, and a, with b's
// whole share outstanding, none, until they ask again).
func absentAt(t *testing.T, s store.Store, r *rules.Rule, key string, want int64) store.Lease {
	t.Helper()
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: key, Node: "b"})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: key, Node: "a"})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: key, Node: "b"})
	l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: key, Node: "a", Want: want})
	if l.Holders != 2 || l.FallbackNodes != 2 {
		t.Fatalf("a's lease %+v, want 2 holders and a fallback of a half", l)
	}
	leave(t, s, r, key, "b")
	return l
}

// A token bucket does not refill an absent holder's r/n: the others get
// what the rest of the rate earns, and no share of the reserved part; the
// absent holder counts among the holders and wants nothing of the grants.
// When it comes back, its report is covered up to (r/n)·(the time since its
// lease ended), and only the rest is debited.
func testAbsentHolderReservesBucket(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	// 1,000 a second, burst 1,000, a 100 ms TTL: a's half is 500 a second.
	r := fastRule(t, 100*time.Millisecond)
	keys := []string{"grant", "rate", "within", "beyond"}
	for _, k := range keys {
		if l := absentAt(t, s, r, k, 1000); l.Granted != 1000 {
			t.Fatalf("%s: a's lease %+v, want the bucket's 1000", k, l)
		}
	}
	h.Advance(t, 300*time.Millisecond) // a's lease ended at 100 ms: 200 ms of 500/s reserved
	l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "grant", Node: "c", Want: 1000})
	if l.Granted != 200 || l.Holders != 2 {
		t.Fatalf("c's lease %+v, want the 200 the unreserved half of the rate earned in 200 ms and the 100 ms before, and 2 holders (a absent)", l)
	}
	if l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "rate", Node: "c", WantRate: 1000}); l.Rate != 500 {
		t.Fatalf("c's share %g/s while a's 500/s is reserved, want 500/s", l.Rate)
	}
	for _, k := range []string{"within", "beyond"} {
		acquireRate(t, s, store.AcquireRequest{Rule: r, Key: k, Node: "c", Want: 1000}) // takes the 200
	}
	h.Advance(t, 100*time.Millisecond) // 50 more earned beside a's reservation, 150 reserved in all
	for _, tc := range []struct {
		key       string
		consumed  int64
		remaining int64
	}{
		{"within", 150, 50}, // all covered: the 50 earned stay
		{"beyond", 180, 20}, // 30 beyond the reservation, debited
	} {
		l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: tc.key, Node: "a", Consumed: tc.consumed, ConsumedAge: 300 * time.Millisecond})
		if l.Remaining != tc.remaining {
			t.Fatalf("%s: a back with %d admitted on its fallback: %+v, want %d left", tc.key, tc.consumed, l, tc.remaining)
		}
	}
}

// A window lends others at most l − count − l/n per absent holder whose
// lease ended by the window's start, and a check admits no more. The
// holder back takes the consumption that began in this window, not what
// began in the one before.
func testAbsentHolderReservesWindow(t *testing.T, h Harness) {
	needFakeClock(t, h)
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		s := h.New(t)
		r := rule(t, rules.Rule{Name: "aw", Algorithm: alg, Limit: 100, Period: time.Second,
			Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}})
		toBoundary(t, h, s, r)
		for _, k := range []string{"k", "old"} {
			absentAt(t, s, r, k, 0)
		}
		// The window a's lease ended in reserves nothing: a does not fall
		// back in a window in which it held a lease.
		if d := check(t, s, r, "k", 0); d.Remaining != 100 {
			t.Fatalf("%s: in a's last window: %+v, want all 100", alg, d)
		}
		h.Advance(t, time.Second) // the next window: a's half, 50, reserved
		l := acquire(t, s, r, "k", "c", 100, 0)
		if l.Granted != 50 || l.Holders != 2 {
			t.Fatalf("%s: c's lease with a absent %+v, want 50 of 100 and 2 holders", alg, l)
		}
		if d := check(t, s, r, "k", 1); d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%s: a check past the reservation: %+v, want refused with a retry_after", alg, d)
		}
		h.Advance(t, 500*time.Millisecond)
		// a back: 30 admitted since 400 ms ago count; the reservation ends.
		req := store.AcquireRequest{Rule: r, Key: "k", Node: "a", Want: 100, Consumed: 30, ConsumedAge: 400 * time.Millisecond}
		if l := acquireRate(t, s, req); l.Granted != 20 {
			t.Fatalf("%s: a back with 30 admitted in this window: %+v, want the 20 left of 100 (50 lent, 30 consumed)", alg, l)
		}
		// Consumption that began in a's last window is dropped with it.
		req = store.AcquireRequest{Rule: r, Key: "old", Node: "a", Want: 100, Consumed: 30, ConsumedAge: time.Second}
		if l := acquireRate(t, s, req); l.Granted != 100 {
			t.Fatalf("%s: a back with 30 admitted in the window before: %+v, want all 100", alg, l)
		}
	}
}

// A state keeps its holders until the last one's absence ends, though its
// bucket is full: forgotten, the absent holder's reservation would go with
// it. Past the absence it is forgotten.
func testAbsentHoldersAreKept(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "keep", Algorithm: rules.TokenBucket, Limit: 1000, Period: time.Second, Burst: 10,
		Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}})
	acquire(t, s, r, "k", "a", 0, 0) // a full bucket, which would expire a TTL later
	h.Advance(t, r.Lease.Absence()/2)
	if l := acquire(t, s, r, "k", "b", 0, 0); l.Holders != 2 {
		t.Fatalf("half an absence after a's lease ended: %+v, want 2 holders", l)
	}
	h.Advance(t, r.Lease.Absence()/2+time.Second)
	if l := acquire(t, s, r, "k", "c", 0, 0); l.Holders != 2 {
		t.Fatalf("past a's absence, within b's: %+v, want 2 holders (b, c)", l)
	}
	// A Release forgets at once.
	if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: "k", Node: "b"}}); err != nil {
		t.Fatal(err)
	}
	if l := acquire(t, s, r, "k", "c", 0, 0); l.Holders != 1 {
		t.Fatalf("after b released: %+v, want 1 holder", l)
	}
}

// A holder back from an absence whose request says it was sent on the
// fallback keeps its reservation until its next request though it reports
// nothing: its fallback may admit while the request is on its way. One that
// does not say so, and reports nothing, is a renewal: its reservation ends.
func testFallbackReturnKeepsReservation(t *testing.T, h Harness) {
	needFakeClock(t, h)
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		s := h.New(t)
		r := rule(t, rules.Rule{Name: "fw", Algorithm: alg, Limit: 100, Period: time.Second,
			Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}})
		toBoundary(t, h, s, r)
		for _, k := range []string{"sent-on-fallback", "renewal"} {
			absentAt(t, s, r, k, 0)
		}
		h.Advance(t, time.Second) // the next window: a's half, 50, reserved
		for _, tc := range []struct {
			key        string
			onFallback bool
			left       int64
		}{
			// a's part kept back until its next request: by the smaller of
			// the counts it was told, 1 now that it is the key's only
			// holder (its answer says so), so all of it.
			{"sent-on-fallback", true, 0},
			{"renewal", false, 100},
		} {
			acquireRate(t, s, store.AcquireRequest{Rule: r, Key: tc.key, Node: "a", OnFallback: tc.onFallback})
			if d := check(t, s, r, tc.key, 0); d.Remaining != tc.left {
				t.Fatalf("%s %s: after a's return %+v, want %d of 100 left", alg, tc.key, d, tc.left)
			}
		}
		// a's next request ends it.
		acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "sent-on-fallback", Node: "a"})
		if d := check(t, s, r, "sent-on-fallback", 0); d.Remaining != 100 {
			t.Fatalf("%s: after a's next request %+v, want all 100 left", alg, d)
		}
	}
}
