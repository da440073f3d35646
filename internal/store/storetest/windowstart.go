package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// A window's room at its start and at its end. Every holder whose lease
// ended with the last window has its l/n kept back in the next one (it may
// fall back there); when it renews from its lease, that l/n is lent to it,
// not water-filled beside the others' wants, which would lend a fleet
// renewing at a window's start an n-th of an n-th first. And a holder lent
// all it asked has no claim on the rest of the window until it asks again:
// a window's room does not refill, and counted at its whole want, every
// served holder would shrink the next grant to an n-th of what is left.
// A holder back under a fresh sequence (a node restarted, its fallback's
// admissions forgotten) is lent none of the l/n kept for it: the window
// counts it spent. Counts exact instants: fake clock only.
func testWindowStartAndEnd(t *testing.T, h Harness) {
	needFakeClock(t, h)
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		s := h.New(t)
		r := rule(t, rules.Rule{Name: "ws", Algorithm: alg, Limit: 100, Period: time.Second,
			Lease: rules.LeaseTuning{TTL: 2 * time.Second}})
		toBoundary(t, h, s, r)
		nodes := []string{"a", "b", "c", "d"}
		seq := map[string]int64{}
		// Each node numbers its requests of a key, as a node does
		// (lease.nextSeq).
		renew := func(key, node string, want int64) store.Lease {
			t.Helper()
			seq[key+node]++
			return acquireReq(t, s, store.AcquireRequest{Rule: r, Key: key, Node: node, Want: want, Seq: seq[key+node]})
		}
		// Twice each, so that each is told 4 holders: its l/n is 25.
		for range 2 {
			for _, n := range nodes {
				renew("start", n, 0)
				renew("restart", n, 0)
			}
		}
		h.Advance(t, time.Second) // the next window; every lease ended with the last
		for _, n := range nodes {
			if l := renew("start", n, 40); l.Granted != 25 {
				t.Fatalf("%s: %s renewing at the window's start: %+v, want its 25 (l/n, kept back for it)", alg, n, l)
			}
		}
		// d restarted: its first request numbers afresh.
		seq["restartd"] = 1000
		if l := renew("restart", "d", 40); l.Granted != 0 {
			t.Fatalf("%s: d restarted at the window's start: %+v, want 0 (its l/n counted spent)", alg, l)
		}
		for _, n := range []string{"a", "b", "c"} {
			if l := renew("restart", n, 40); l.Granted != 25 {
				t.Fatalf("%s: %s renewing beside the restarted d: %+v, want its 25", alg, n, l)
			}
		}
		if l := renew("restart", "d", 40); l.Granted != 0 {
			t.Fatalf("%s: d renewing after its restart: %+v, want 0 (the window is spent)", alg, l)
		}
		if l := acquire(t, s, r, "start", "e", 100, 0); l.Granted != 0 {
			t.Fatalf("%s: e with the window lent: %+v, want 0", alg, l)
		}
		// In a window of its own, a, b and c are lent the 10 each asks;
		// d, asking 100, is lent the other 70.
		for _, n := range []string{"a", "b", "c"} {
			acquire(t, s, r, "end", n, 10, 0)
		}
		if l := acquire(t, s, r, "end", "d", 100, 0); l.Granted != 70 {
			t.Fatalf("%s: d after a, b and c were lent what they asked: %+v, want the 70 left", alg, l)
		}
	}
}
