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
