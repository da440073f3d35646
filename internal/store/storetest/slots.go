package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Concurrency rules: slots leased to nodes, never more than the limit held
// at once, a node's kept slots never lent to another while its lease
// lasts, fair shares by want, and a lease that ends (a crashed node) gives
// its slots back.

var slotTests = []struct {
	name string
	f    func(*testing.T, Harness)
}{
	{"SlotsNeverOverLent", testSlotsNeverOverLent},
	{"SlotsKeptAreNotLent", testSlotsKeptAreNotLent},
	{"SlotsLateRequestIsNotApplied", testSlotsLateRequest},
	{"SlotsShareFairly", testSlotsShareFairly},
	{"SlotsComeBackWhenLeaseEnds", testSlotsComeBack},
	{"SlotsReleaseGivesAllBack", testSlotsRelease},
	{"SlotsAreNotChecked", testSlotsNotChecked},
}

func slotRule(t *testing.T, limit int64, ttl time.Duration) *rules.Rule {
	return rule(t, rules.Rule{Name: "cc", Algorithm: rules.Concurrency, Limit: limit,
		Lease: rules.LeaseTuning{TTL: ttl}, MaxHold: ttl / 4})
}

func takeSlots(t *testing.T, s store.Store, r *rules.Rule, key, node string, want, kept int64) store.Lease {
	t.Helper()
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: key, Node: node, Want: want, SlotsKept: kept}})
	if err != nil {
		t.Fatalf("Acquire(%s, want %d, kept %d): %v", node, want, kept, err)
	}
	return ls[0]
}

func takeSlotsSeq(t *testing.T, s store.Store, r *rules.Rule, node string, want, kept, seq int64) store.Lease {
	t.Helper()
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: node, Want: want, SlotsKept: kept, Seq: seq}})
	if err != nil {
		t.Fatalf("Acquire(%s, want %d, kept %d, seq %d): %v", node, want, kept, seq, err)
	}
	return ls[0]
}

// A node's request at or below the seq of its last applied one (a
// duplicate, or one that came after the next) is not applied: applied, it
// would weigh the node's want against another's of the time and record
// fewer slots than its answer lent it. The same one again is told what
// the node holds, an older one nothing.
func testSlotsLateRequest(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 4, time.Hour)
	if l := takeSlotsSeq(t, s, r, "a", 4, 2, 7); l.Granted != 4 {
		t.Fatalf("a alone, want 4: granted %d", l.Granted)
	}
	if l := takeSlotsSeq(t, s, r, "b", 4, 0, 1); l.Granted != 0 || l.SlotShare != 2 {
		t.Fatalf("b while a holds all 4: granted %d share %d, want 0 of a share of 2", l.Granted, l.SlotShare)
	}
	if l := takeSlotsSeq(t, s, r, "a", 4, 2, 7); l.Granted != 4 {
		t.Fatalf("a's request again: granted %d, want the 4 it holds", l.Granted)
	}
	if l := takeSlotsSeq(t, s, r, "a", 4, 2, 6); l.Granted != 0 {
		t.Fatalf("a's older request: granted %d, want nothing", l.Granted)
	}
	if l := takeSlotsSeq(t, s, r, "b", 4, 0, 2); l.Granted != 0 {
		t.Fatalf("b after a's late requests: granted %d, want 0 (a holds 4)", l.Granted)
	}
	if l := takeSlotsSeq(t, s, r, "a", 4, 2, 8); l.Granted != 2 {
		t.Fatalf("a's next request, keeping 2: granted %d, want its share of 2", l.Granted)
	}
	if l := takeSlotsSeq(t, s, r, "b", 4, 0, 3); l.Granted != 2 {
		t.Fatalf("b once a kept 2: granted %d, want 2", l.Granted)
	}
}

// 200 nodes at once each asking for one slot of 50: exactly 50 held.
func testSlotsNeverOverLent(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 50, time.Hour)
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "hot", Node: fmt.Sprintf("n%d", i), Want: 1}})
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(ls[0].Granted)
		}()
	}
	wg.Wait()
	if got := granted.Load(); got != 50 {
		t.Fatalf("200 nodes asking one slot each of 50: %d granted, want exactly 50", got)
	}
}

func testSlotsKeptAreNotLent(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 8, time.Hour)
	if l := takeSlots(t, s, r, "k", "a", 5, 0); l.Granted != 5 || l.Remaining != 3 {
		t.Fatalf("a: %+v, want 5 granted, 3 remaining", l)
	}
	if l := takeSlots(t, s, r, "k", "b", 8, 0); l.Granted != 3 {
		t.Fatalf("b: granted %d, want the 3 a does not hold", l.Granted)
	}
	// a keeps its 5 even above its share (4 of 8 for two wanting 8).
	if l := takeSlots(t, s, r, "k", "a", 8, 5); l.Granted != 5 || l.SlotShare != 4 {
		t.Fatalf("a renewing: %+v, want its 5 kept and told its share of 4", l)
	}
	// Keeping more than it holds keeps what it holds.
	if l := takeSlots(t, s, r, "k", "a", 8, 7); l.Granted != 5 {
		t.Fatalf("a claiming 7 kept: granted %d, want the 5 it holds", l.Granted)
	}
	// a gives back to its share; b grows into it.
	if l := takeSlots(t, s, r, "k", "a", 4, 4); l.Granted != 4 {
		t.Fatalf("a down to 4: granted %d", l.Granted)
	}
	if l := takeSlots(t, s, r, "k", "b", 8, 3); l.Granted != 4 || l.Holders != 2 {
		t.Fatalf("b after a gave one back: %+v, want 4, 2 holders", l)
	}
	// Asked twice (an answer lost), a request means what it meant once.
	if l := takeSlots(t, s, r, "k", "b", 8, 3); l.Granted != 4 {
		t.Fatalf("b asking again: granted %d, want 4", l.Granted)
	}
}

func testSlotsShareFairly(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 20, time.Hour)
	// Water-filling: a small want is met, the rest is split by level.
	takeSlots(t, s, r, "k", "small", 2, 0)
	for _, n := range []string{"a", "b", "c"} {
		takeSlots(t, s, r, "k", n, 20, 0)
	}
	// 18 over a, b, c wanting 20 each: 6 each.
	for _, n := range []string{"a", "b", "c"} {
		if l := takeSlots(t, s, r, "k", n, 20, 0); l.SlotShare != 6 {
			t.Fatalf("%s: share %d, want 6 (20 less small's 2, over 3)", n, l.SlotShare)
		}
	}
	// A fifth holder: 18 over 4 is 4 each and 2 left over, to the older
	// holders, a and b. Each gives back down to its share at its renewal,
	// and d grows into what they free.
	if l := takeSlots(t, s, r, "k", "d", 20, 0); l.SlotShare != 4 || l.Granted != 0 {
		t.Fatalf("d: %+v, want share 4, nothing free to grant", l)
	}
	for n, share := range map[string]int64{"a": 5, "b": 5, "c": 4} {
		if l := takeSlots(t, s, r, "k", n, 20, 0); l.SlotShare != share || l.Granted != share {
			t.Fatalf("%s keeping nothing: %+v, want share %d and as many held", n, l, share)
		}
	}
	if l := takeSlots(t, s, r, "k", "d", 20, 0); l.Granted != 4 {
		t.Fatalf("d after the others gave back: granted %d, want 4", l.Granted)
	}
}

// A node that stops renewing (it crashed) holds its slots until its lease
// ends, not longer.
func testSlotsComeBack(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 10, 200*time.Millisecond)
	takeSlots(t, s, r, "k", "dead", 10, 0)
	if l := takeSlots(t, s, r, "k", "b", 10, 0); l.Granted != 0 {
		t.Fatalf("b while dead's lease lasts: %d granted, want 0", l.Granted)
	}
	h.Advance(t, 250*time.Millisecond)
	if l := takeSlots(t, s, r, "k", "b", 10, 0); l.Granted != 10 || l.Holders != 1 {
		t.Fatalf("b once dead's lease ended: %+v, want all 10, 1 holder", l)
	}
}

func testSlotsRelease(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 10, time.Hour)
	takeSlots(t, s, r, "k", "a", 6, 0)
	takeSlots(t, s, r, "k", "b", 10, 0)
	if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: "k", Node: "a", Tokens: 3}}); err != nil {
		t.Fatal(err)
	}
	if l := takeSlots(t, s, r, "k", "b", 10, 4); l.Granted != 10 || l.Holders != 1 {
		t.Fatalf("b after a released: %+v, want all 10", l)
	}
}

func testSlotsNotChecked(t *testing.T, h Harness) {
	s, r := h.New(t), slotRule(t, 10, time.Hour)
	if _, err := s.Check(context.Background(), r, "k", 1); !errors.Is(err, store.ErrConcurrencyCheck) {
		t.Fatalf("Check on a concurrency rule: %v, want ErrConcurrencyCheck", err)
	}
}
