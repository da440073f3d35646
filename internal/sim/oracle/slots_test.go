package oracle

import (
	"testing"
	"time"
)

// Concurrency rules: slots in flight at every instant, on both sides of
// each bound.

// slotRule is 10 in flight, TTL 1 s, max_hold 500 ms.
func slotRule(at time.Duration, closed bool) ev {
	return func(o *Oracle) {
		o.SetSlotRule(at, SlotRule{Name: "r", Limit: 10, TTL: time.Second, MaxHold: 500 * ms, FailClosed: closed})
	}
}

func took(at time.Duration, node, n int, m Mode) ev {
	return func(o *Oracle) {
		for range n {
			o.Took(at, node, "r", "k", m)
		}
	}
}

func gave(at time.Duration, node, n int, m Mode) ev {
	return func(o *Oracle) {
		for range n {
			o.Gave(at, node, "r", "k", m)
		}
	}
}

func slotGrant(at, sent time.Duration, node int, n int64) ev {
	return func(o *Oracle) { o.SlotGranted(at, sent, node, "r", "k", n, time.Second) }
}

func crashed(at time.Duration, node int) ev {
	return func(o *Oracle) { o.SlotsCrashed(at, node) }
}

func restarted(at time.Duration, node int, sameID bool) ev {
	return func(o *Oracle) { o.SlotsRestarted(at, node, sameID) }
}

func TestSlotsInFlight(t *testing.T) {
	runCases(t, []tcase{
		{name: "the limit in flight", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 6, Lease), took(ms, 1, 4, Lease)}},
		{name: "one more", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 6, Lease), took(ms, 1, 5, Lease)},
			want: []want{{inv: InvSlots, node: -1, from: ms, to: ms, measured: 11, bound: 10}}},
		{name: "one given back first", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 6, Lease), took(ms, 1, 4, Lease),
			gave(2*ms, 0, 1, Lease), took(2*ms, 1, 1, Lease)}},
		{name: "a fallback without a fault counts in the fleet's", nodes: 2, evs: []ev{slotRule(0, false),
			took(0, 0, 10, Lease), took(ms, 1, 1, Fallback)},
			want: []want{{inv: InvSlots, node: -1, from: ms, to: ms, measured: 11, bound: 10}}},
	})
}

// A node cut off on failure: open adds its fallback of ⌊l/N⌋ (5 of 10 on
// two nodes), and no more; with failure: closed, it has none.
func TestSlotsCutOff(t *testing.T) {
	runCases(t, []tcase{
		{name: "l + ⌊l/N⌋ with one node cut off", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(0, 0, 10, Lease), took(ms, 1, 5, Fallback)}},
		{name: "its fallback's own bound", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(0, 0, 4, Lease), took(ms, 1, 6, Fallback)},
			want: []want{{inv: InvSlotsNode, node: 1, from: ms, to: ms, measured: 6, bound: 5}}},
		{name: "one more than that", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(0, 0, 10, Lease), took(ms, 1, 5, Fallback), took(2*ms, 0, 1, Lease)},
			want: []want{{inv: InvSlots, node: -1, from: 2 * ms, to: 2 * ms, measured: 16, bound: 15}}},
		{name: "no allowance for a node with no fallback slot", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(0, 0, 11, Lease)},
			want: []want{{inv: InvSlots, node: -1, from: 0, to: 0, measured: 11, bound: 10}}},
		{name: "failure: closed has no fallback", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, true),
			took(0, 0, 10, Lease), took(ms, 1, 1, Fallback)},
			want: []want{{inv: InvClosed, node: 1, from: ms, to: ms, measured: 1, bound: 0},
				{inv: InvSlots, node: -1, from: ms, to: ms, measured: 11, bound: 10}}},
	})
}

// A crashed node's lease slots are counted until its lease ends (sent +
// TTL), no longer; a restart under its id ends them at once.
func TestSlotsCrashed(t *testing.T) {
	const end = 100*ms + time.Second // node 0's lease: sent at 100 ms
	base := []ev{slotRule(0, false), slotGrant(110*ms, 100*ms, 0, 6), took(200*ms, 0, 6, Lease), crashed(300*ms, 0)}
	with := func(evs ...ev) []ev { return append(append([]ev(nil), base...), evs...) }
	runCases(t, []tcase{
		{name: "the others hold the rest while its lease lasts", nodes: 2, evs: with(took(400*ms, 1, 4, Lease))},
		{name: "not its slots", nodes: 2, evs: with(took(400*ms, 1, 5, Lease)),
			want: []want{{inv: InvSlots, node: -1, from: 400 * ms, to: 400 * ms, measured: 11, bound: 10}}},
		{name: "an instant before its lease ends", nodes: 2, evs: with(took(end-1, 1, 5, Lease)),
			want: []want{{inv: InvSlots, node: -1, from: end - 1, to: end - 1, measured: 11, bound: 10}}},
		{name: "all of them once it ends", nodes: 2, evs: with(took(end, 1, 10, Lease))},
		{name: "its fallback slots die with it", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(0, 0, 5, Fallback), crashed(ms, 0), took(2*ms, 1, 10, Lease)}},
		{name: "a restart under its id ends them", nodes: 2, evs: with(restarted(500*ms, 0, true), took(500*ms, 1, 10, Lease))},
		{name: "under a new id it does not", nodes: 2, evs: with(restarted(500*ms, 0, false), took(500*ms, 1, 5, Lease)),
			want: []want{{inv: InvSlots, node: -1, from: 500 * ms, to: 500 * ms, measured: 11, bound: 10}}},
	})
}

// A reload that halves the limit holds the fleet to the old one until
// every node has learned it, plus the old TTL and max_hold.
func TestSlotsReload(t *testing.T) {
	half := func(at time.Duration) ev {
		return func(o *Oracle) { o.SetSlotRule(at, SlotRule{Name: "r", Limit: 5, TTL: time.Second, MaxHold: 500 * ms}) }
	}
	learnedAt := func(at time.Duration) ev { return func(o *Oracle) { o.Learned(at, "r", 1) } }
	runCases(t, []tcase{
		{name: "the old limit while it drains", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 10, Lease),
			half(ms), learnedAt(2 * ms), took(2*ms+1500*ms-1, 1, 0, Lease), gave(3*ms, 0, 1, Lease), took(4*ms, 1, 1, Lease)}},
		{name: "the new one after", nodes: 2, evs: []ev{slotRule(0, false), half(ms), learnedAt(2 * ms),
			took(2*ms+1500*ms, 1, 6, Lease)},
			want: []want{{inv: InvSlots, node: -1, from: 2*ms + 1500*ms, to: 2*ms + 1500*ms, measured: 6, bound: 5}}},
	})
}

func TestSlotUse(t *testing.T) {
	o := run(1, []ev{slotRule(0, false), took(0, 0, 5, Lease), gave(time.Second, 0, 5, Lease)})
	r := o.Finish(2 * time.Second)
	if len(r.Slots) != 1 || !near(r.Slots[0].Busy, 5) || !near(r.Slots[0].Ratio, 0.25) {
		t.Fatalf("slot use %+v, want 5 slot-seconds, 0.25 of 10 over 2 s", r.Slots)
	}
	if len(r.Violations) != 0 {
		t.Fatalf("violations %v", r.Violations)
	}
}

// The store's clock stepped forward ends its leases early: for a TTL the
// fleet may run what the store forgot beside what it lends anew.
func TestSlotsStoreClockAhead(t *testing.T) {
	runCases(t, []tcase{
		{name: "2·l for a TTL after the step", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 10, Lease),
			step(100*ms, 100*ms, 2100*ms), took(1100*ms-1, 1, 10, Lease)}},
		{name: "l after it", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 10, Lease),
			step(100*ms, 100*ms, 2100*ms), took(1100*ms, 1, 1, Lease)},
			want: []want{{inv: InvSlots, node: -1, from: 1100 * ms, to: 1100 * ms, measured: 11, bound: 10}}},
		{name: "a step back gives nothing", nodes: 2, evs: []ev{slotRule(0, false), took(0, 0, 10, Lease),
			step(100*ms, 2100*ms, 100*ms), took(200*ms, 1, 1, Lease)},
			want: []want{{inv: InvSlots, node: -1, from: 200 * ms, to: 200 * ms, measured: 11, bound: 10}}},
	})
}

// A fallback slot is excused for the rule's TTL after the fault: a call
// sent into it times out after it.
func TestSlotsExcuseAfterFault(t *testing.T) {
	runCases(t, []tcase{
		{name: "within a TTL of the fault", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(1900*ms, 0, 10, Lease), took(1999*ms, 1, 5, Fallback)}},
		{name: "past it", nodes: 2, evs: []ev{faulty(0, time.Second), slotRule(0, false),
			took(1900*ms, 0, 10, Lease), took(2*time.Second, 1, 1, Fallback)},
			want: []want{{inv: InvSlots, node: -1, from: 2 * time.Second, to: 2 * time.Second, measured: 11, bound: 10}}},
	})
}
