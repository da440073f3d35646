package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// A token bucket's tokens lent and not yet spent are still the bucket's
// (docs/bounds.md, rule 6): it refills only up to its burst less what its
// present holders may hold, as they last said. Refilled past them, a node
// that kept its lease's burst and the bucket's new burst were spent in
// one second: 2·b + r where a central bucket admits b + r.
func testHeldCapsBucket(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "ceil", Algorithm: rules.TokenBucket, Limit: 100, Period: time.Second, Burst: 10})
	ask := func(node string, want, held int64) store.Lease {
		t.Helper()
		return acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: node, Want: want, Held: held, HeldKnown: true})
	}
	if l := ask("a", 10, 0); l.Granted != 10 {
		t.Fatalf("a's first lease %+v, want the burst 10", l)
	}
	h.Advance(t, 200*time.Millisecond) // 20 tokens at 100/s, the bucket holding at most 10
	if l := ask("b", 10, 0); l.Granted != 0 {
		t.Fatalf("b granted %d while a holds the 10 it was lent, want 0: the bucket and a would admit 20 at once", l.Granted)
	}
	if l := ask("a", 0, 10); l.Granted != 0 || l.Remaining != 0 {
		t.Fatalf("a says it still holds 10: %+v, want nothing left to lend", l)
	}
	// a says it spent them: the ceiling rises, and the bucket refills
	// from here (what it could not hold before is gone).
	if l := ask("a", 0, 0); l.Remaining != 0 {
		t.Fatalf("a says it spent its 10: %+v, want the bucket still empty, refilling from now", l)
	}
	h.Advance(t, 50*time.Millisecond)
	if l := ask("b", 10, 0); l.Granted != 5 {
		t.Fatalf("b granted %d 50 ms after a said it spent its tokens, want the 5 refilled", l.Granted)
	}
	// A lease's end ends its tokens: they no longer cap the bucket.
	h.Advance(t, r.Lease.TTL+200*time.Millisecond)
	if l := ask("c", 10, 0); l.Granted != 10 {
		t.Fatalf("c granted %d after a's and b's leases ended, want the burst 10", l.Granted)
	}
}

// Room a holder's spending opens was not there before it spent: refill
// the bucket earned before then does not fill it (docs/bounds.md, rule 6).
// A request says how long the node has held no more than it says
// (HeldFor); a node that predates it has its report taken as held since
// its last request, and the room fills from the whole interval.
func testHeldForKeepsEarlierRefillOut(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "heldfor", Algorithm: rules.TokenBucket, Limit: 100, Period: time.Second, Burst: 10,
		Lease: rules.LeaseTuning{TTL: 2 * time.Second}})
	ask := func(key string, want, held int64, heldFor time.Duration, known bool) store.Lease {
		t.Helper()
		return acquireRate(t, s, store.AcquireRequest{Rule: r, Key: key, Node: "a", Want: want, Held: held, HeldKnown: true,
			HeldFor: heldFor, HeldForKnown: known})
	}
	for _, key := range []string{"spent-lately", "spent-now", "older-node"} {
		if l := ask(key, 10, 0, 0, true); l.Granted != 10 {
			t.Fatalf("%s: first lease %+v, want the burst 10", key, l)
		}
	}
	h.Advance(t, time.Second) // a keeps its 10 (its lease lasts 2 s) through a quiet second: the bucket holds none of its refill
	if l := ask("spent-lately", 0, 0, 50*time.Millisecond, true); l.Remaining != 5 {
		t.Fatalf("spent 50 ms ago: %d left, want the 5 the bucket earned since, not the second's 10", l.Remaining)
	}
	if l := ask("spent-now", 0, 0, 0, true); l.Remaining != 0 {
		t.Fatalf("spent just now: %d left, want none yet", l.Remaining)
	}
	if l := ask("older-node", 0, 0, 0, false); l.Remaining != 10 {
		t.Fatalf("a node that does not say: %d left, want the room filled from the whole second (10)", l.Remaining)
	}
}
