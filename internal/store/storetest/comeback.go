package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// A holder back from an absence (docs/bounds.md, rule 4): its first
// request reports what its fallback admitted, but the node keeps admitting
// on its fallback until that request's answer arrives, and reports those
// admissions with its next request (what the return's grant does not pay
// for). Its reservation lasts until then: what it holds is not lent to the
// others meanwhile. Before, the store ended the reservation at the first
// request and lent its part at once (the fleet simulator saw a fixed window
// of 1,000 admit 1,008, one node, a lossy network). Exact instants: fake
// clock only.

// A token bucket: what the others were lent between a's two requests, plus
// what a reported at each (X on its return, Y admitted while its return was
// in flight), stays within b + r·(T + ttl), T the time between the two
// requests. The store ended the reservation at the return and lent the
// others a's 500/s of the flight too: 90 + 180 + 45 = 315 against 290.
func testBackHolderKeepsReservationBucket(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	// 1,000 a second, burst 100, a 100 ms TTL: a's half is 500 a second.
	r := rule(t, rules.Rule{Name: "back", Algorithm: rules.TokenBucket, Limit: 1000, Period: time.Second, Burst: 100,
		Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}})
	absentAt(t, s, r, "k", 0)
	// c empties the bucket, and leaves: a's lease ends at 100 ms.
	acquire(t, s, r, "k", "c", 1000, 0)
	leave(t, s, r, "k", "c")
	h.Advance(t, 500*time.Millisecond)
	// c comes back for what the bucket earned beside a's reservation (200
	// reserved over 400 ms), just before a returns: 2 holders.
	acquire(t, s, r, "k", "c", 1000, 0)
	const x, y, flight = 180, 45, 90 * time.Millisecond
	back := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: x, ConsumedAge: 400 * time.Millisecond})
	if back.Holders != 2 || back.Remaining != 0 {
		t.Fatalf("a back with %d admitted on its fallback (200 reserved): %+v, want 2 holders and nothing debited", x, back)
	}
	// a's return is in flight for 90 ms: its fallback admits 500/s of it.
	h.Advance(t, flight)
	lent := acquire(t, s, r, "k", "c", 1000, 0).Granted
	next := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: y, ConsumedAge: flight})
	bound := float64(r.Burst) + r.Rate()*(flight+r.Lease.TTL).Seconds()
	if sum := lent + x + y; float64(sum) > bound {
		t.Fatalf("between a's return and its next request: the others were lent %d, a reported %d then %d: %d in %v, over b + r·(T + ttl) = %g",
			lent, x, y, sum, flight, bound)
	}
	if next.Remaining != 0 {
		t.Fatalf("a's next request, %d admitted in flight within its reservation: %+v, want nothing debited", y, next)
	}
	// The reservation ends with a's next request: the whole rate again.
	h.Advance(t, 10*time.Millisecond)
	if l := acquire(t, s, r, "k", "c", 1000, 0); l.Granted != 10 {
		t.Fatalf("10 ms after a's next request: %+v, want the 10 the whole rate earns", l)
	}
}

// Fixed and sliding windows: what the window admits, the others' grants
// and a's reports on its return (X) and at its next request (Y, admitted
// while its return was in flight, the rest of its l/n), stays within l.
// The store ended the reservation at the return and lent its rest to c:
// 50 + 20 + 30 + 20 = 120 in a window of 100. (A return that asks is
// granted from what the others leave, as before: the node pays for its
// flight from that grant first, and the window keeps back only the rest;
// AbsentHolderReservesWindow.)
func testBackHolderKeepsReservationWindow(t *testing.T, h Harness) {
	needFakeClock(t, h)
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) { backHolderKeepsReservationWindow(t, h, alg) })
	}
}

func backHolderKeepsReservationWindow(t *testing.T, h Harness, alg rules.Algorithm) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "bw", Algorithm: alg, Limit: 100, Period: time.Second,
		Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}})
	toBoundary(t, h, s, r)
	absentAt(t, s, r, "k", 0)
	h.Advance(t, time.Second) // the next window: a's half, 50, reserved
	admitted := acquire(t, s, r, "k", "c", 100, 0).Granted
	h.Advance(t, 300*time.Millisecond)
	const x, y = 30, 20
	req := store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: x, ConsumedAge: 250 * time.Millisecond}
	acquireRate(t, s, req)
	// c's lease ended in this window: it does not fall back here and
	// nothing is kept for it.
	admitted += acquire(t, s, r, "k", "c", 100, 0).Granted
	h.Advance(t, 50*time.Millisecond)
	req = store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: y, ConsumedAge: 50 * time.Millisecond}
	acquireRate(t, s, req)
	admitted += acquire(t, s, r, "k", "c", 100, 0).Granted
	if d := check(t, s, r, "k", 1); d.Allowed {
		admitted++
	}
	if sum := admitted + x + y; sum > r.Limit {
		t.Fatalf("the others admitted %d, a reported %d on its return and %d at its next request: %d in a window of %d",
			admitted, x, y, sum, r.Limit)
	}

	// A holder absent within the window its lease was in does not fall
	// back there (rule 5): back, it keeps nothing back from itself.
	acquire(t, s, r, "own", "d", 10, 0)
	h.Advance(t, 200*time.Millisecond)
	if l := acquire(t, s, r, "own", "d", 100, 0); l.Granted != 90 {
		t.Fatalf("d again in the window of its ended lease: %+v, want the 90 left", l)
	}
}
