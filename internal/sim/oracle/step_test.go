package oracle

import (
	"testing"
	"time"
)

// manyS admits n requests of cost 1 at at, the store's clock at storeAt.
func manyS(at, storeAt time.Duration, node, n int, m Mode) ev {
	return func(o *Oracle) {
		for range n {
			o.Admitted(at, storeAt, node, "r", "k", 1, m)
		}
	}
}

// decided says the store decided on the key at at, its clock at storeAt.
func decided(at, storeAt time.Duration) ev {
	return func(o *Oracle) { o.StoreDecided(at, storeAt, "r", "k") }
}

func step(at, before, after time.Duration) ev {
	return func(o *Oracle) { o.StoreClockStep(at, before, after) }
}

// The store's clock stepped back: the store keeps its later window and
// decides at its start, so the oracle counts there too: a window does not
// reopen, and the later one holds its limit; but a cut-off node's windows
// are off by the step, and the windows the step spans may take a limit
// more. Only a window the store decided in is kept: tokens it lent before
// spent at a later instant of its clock do not move its window.
func TestStoreClockSteppedBack(t *testing.T) {
	const t0, t1 = 2500 * ms, 2600 * ms
	r := window(FixedWindow, 5, time.Second)
	runCases(t, []tcase{
		{name: "the later window holds its limit", evs: []ev{setRule(0, r), decided(t0, t0), manyS(t0, t0, 1, 5, Lease),
			manyS(t1, 700*ms, 1, 1, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 2 * time.Second, to: 3 * time.Second, store: true, measured: 6, bound: 5}}},
		{name: "a window spent in but never decided in is not kept (seed 98100)", evs: []ev{setRule(0, r), decided(0, 100*ms),
			manyS(t0, t0, 1, 5, Lease), manyS(t1, 700*ms, 1, 5, Lease)}},
		{name: "but the windows it spans may take a limit more", evs: []ev{setRule(0, r), manyS(t0, t0, 1, 5, Lease),
			step(t1, t1, 700*ms), manyS(t1, 700*ms, 1, 5, Lease)}},
	})
}

// The store's clock stepped forward: what it lent before may be spent
// after, in a later window, and a bucket refills the step's worth.
func TestStoreClockSteppedForward(t *testing.T) {
	const t0, t1, t2 = 500 * ms, 600 * ms, 700 * ms
	w := window(FixedWindow, 5, time.Second)
	b := bucket(time.Second) // b 10, r 10/s, L 1 s
	runCases(t, []tcase{
		{name: "a window the step lands in may take a limit more", evs: []ev{setRule(0, w), manyS(t0, t0, 1, 5, Lease),
			step(t1, t1, 2600*ms), manyS(t2, 2700*ms, 1, 6, Lease)}},
		{name: "without the step, it may not", evs: []ev{setRule(0, w), manyS(t0, t0, 1, 5, Lease),
			manyS(t2, 2700*ms, 1, 6, Lease)},
			want: []want{{inv: InvWindow, node: -1, from: 2 * time.Second, to: 3 * time.Second, store: true, measured: 6, bound: 5}}},
		{name: "a bucket refilled by the step", evs: []ev{faulty(0, 2*time.Second), setRule(0, b), many(0, 1, 20, Lease),
			step(t0, t0, t0+time.Second), many(t0, 1, 10, Lease)}},
		{name: "a bucket without it", evs: []ev{faulty(0, 2*time.Second), setRule(0, b), many(0, 1, 20, Lease),
			many(t0, 1, 10, Lease)},
			want: []want{{inv: InvBucket, node: -1, from: 0, to: t0, measured: 26, bound: 25}}},
	})
}

// A node that has not heard from the allocator since the store's clock
// stepped counts its fallback in windows off by the step, for as long as it
// stays cut off, not only in the windows the step spans: a window its
// fallback admits in, however long after the step, may take a limit more;
// once it has heard (a grant), its windows are the store's again.
func TestStoreClockStepMisplacesCutOffNodes(t *testing.T) {
	w := window(FixedWindow, 5, time.Second)
	const far = 9500 * ms // long after the step's span
	runCases(t, []tcase{
		{name: "a cut-off node's fallback, long after the step", evs: []ev{faulty(0, 20*time.Second), setRule(0, w),
			grant(0, 0, 1, 1, 0, time.Second), grant(0, 0, 2, 1, 0, time.Second), step(500*ms, 500*ms, 1200*ms),
			manyS(far, far, 1, 5, Lease), manyS(far, far, 2, 3, Fallback)}},
		{name: "without the step, it may not", evs: []ev{faulty(0, 20*time.Second), setRule(0, w),
			grant(0, 0, 1, 1, 0, time.Second), grant(0, 0, 2, 1, 0, time.Second), manyS(far, far, 1, 5, Lease), manyS(far, far, 2, 3, Fallback)},
			want: []want{{inv: InvWindow, node: -1, from: 9 * time.Second, to: 10 * time.Second, store: true, measured: 6, bound: 5}}},
		{name: "nor once the node has heard since", evs: []ev{faulty(0, 20*time.Second), setRule(0, w),
			grant(0, 0, 1, 1, 0, time.Second), grant(0, 0, 2, 1, 0, time.Second), step(500*ms, 500*ms, 1200*ms), grant(2*time.Second, 2*time.Second, 2, 1, 0, time.Second),
			manyS(far, far, 1, 5, Lease), manyS(far, far, 2, 3, Fallback)},
			want: []want{{inv: InvWindow, node: -1, from: 9 * time.Second, to: 10 * time.Second, store: true, measured: 6, bound: 5}}},
	})
}

// A step back of d stretches the store's window it lands in to P + d of
// true time: a node cut off since counts 1 + ⌈d/P⌉ windows of its own in
// it, each with its part, and the window may take ⌈d/P⌉ limits more (one
// for a step back of less than a period).
func TestStoreClockStepBackStretchesAWindow(t *testing.T) {
	w := window(FixedWindow, 5, time.Second)
	// Store window 2 from true 2 s; stepped back 2.5 s at 2.9 s, it stays
	// in window 2 until true 5.5 s: the cut-off node 2 counts its windows
	// 2, 3, 4 and 5 in it.
	base := []ev{faulty(0, 20*time.Second), setRule(0, w), grant(0, 0, 1, 1, 0, time.Second),
		grant(0, 0, 2, 1, 0, time.Second), manyS(2*time.Second, 2*time.Second, 1, 5, Lease),
		step(2900*ms, 2900*ms, 400*ms)}
	fallback := func(at time.Duration, n int) ev { return manyS(at, 2*time.Second, 2, n, Fallback) }
	runCases(t, []tcase{
		{name: "three limits more in a window stretched by 2.5 periods", evs: append(append([]ev(nil), base...),
			fallback(3100*ms, 5), fallback(4100*ms, 5), fallback(5100*ms, 5))},
		{name: "past them", evs: append(append([]ev(nil), base...),
			fallback(3100*ms, 5), fallback(4100*ms, 5), fallback(5100*ms, 6)),
			want: []want{{inv: InvWindow, node: -1, from: 2 * time.Second, to: 3 * time.Second, store: true, measured: 21, bound: 20}}},
	})
}

// A step back settles only when the store's clock is back at the end of
// the window it kept: a grant meanwhile names that window while the
// clock reads earlier, and teaches the node windows off by the gap. A node
// cut off after hearing within the stretch is misplaced still; one that
// heard after it is not.
func TestStoreClockStepBackSettlesAtTheKeptWindowsEnd(t *testing.T) {
	w := window(FixedWindow, 5, time.Second)
	// Stepped back from 2.9 s to 0.4 s at true 2.9 s: the store keeps
	// window 2 until its clock reads 3 s, at true 5.5 s.
	const far = 9500 * ms
	heardAt := func(at time.Duration) []ev {
		return []ev{faulty(0, 20*time.Second), setRule(0, w), grant(0, 0, 1, 1, 0, time.Second),
			grant(0, 0, 2, 1, 0, time.Second), step(2900*ms, 2900*ms, 400*ms), grant(at, at, 2, 1, 0, time.Second),
			manyS(far, far, 1, 5, Lease), manyS(far, far, 2, 3, Fallback)}
	}
	runCases(t, []tcase{
		{name: "heard within the stretch: misplaced", evs: heardAt(4 * time.Second)},
		{name: "heard after it: not", evs: heardAt(6 * time.Second),
			want: []want{{inv: InvWindow, node: -1, from: 9 * time.Second, to: 10 * time.Second, store: true, measured: 6, bound: 5}}},
	})
}

// Only a window rule's grant tells a node where the store's windows lie (it
// names its window; a token bucket's names no instant of the store's
// clock): a node whose last window grant was from before a step counts its
// fallback in windows off by it, whatever token bucket grants reached it
// since (seed 52685: a bucket's grant 88 ms after a 2.972 s step forward,
// then a cut of 12.9 s; the node's windows began 28 ms before the store's,
// and it spent its part of 6 in each of two of its own that one store
// window of 20 overlapped: 21).
func TestStoreClockStepMisplacesUntilAWindowGrant(t *testing.T) {
	w := window(FixedWindow, 5, time.Second)
	const far = 9500 * ms
	heard := func(rule string) []ev {
		return []ev{faulty(0, 20*time.Second), setRule(0, w),
			func(o *Oracle) { b := bucket(time.Second); b.Name = "b"; o.SetRule(0, b) },
			grant(0, 0, 1, 1, 0, time.Second), grant(0, 0, 2, 1, 0, time.Second), step(500*ms, 500*ms, 1200*ms),
			func(o *Oracle) { o.Granted(2*time.Second, 2*time.Second, 2, rule, "k", 1, 0, time.Second) },
			manyS(far, far, 1, 5, Lease), manyS(far, far, 2, 3, Fallback)}
	}
	runCases(t, []tcase{
		{name: "a token bucket's grant since: misplaced still", evs: heard("b")},
		{name: "a window's grant since: not", evs: heard("r"),
			want: []want{{inv: InvWindow, node: -1, from: 9 * time.Second, to: 10 * time.Second, store: true, measured: 6, bound: 5}}},
	})
}
