package lease

import (
	"fmt"
	"testing"
	"time"
)

// outage fails every call the Core makes from now until at, turning it
// every 10 ms as the Manager's loop would: an allocator that stays
// unreachable.
func outage(g *rig, at time.Duration) {
	for g.now()-g.start < at {
		g.fail()
		g.to(g.now() - g.start + 10*time.Millisecond)
	}
	g.fail()
}

// A failed call is news of an outage only while a call made since would
// have failed too, or one made since is still out. A new key decided while
// it is news falls back at once; one decided once the node has made no
// call for long (its keys went quiet in the outage, the cut has ended)
// waits for its first lease, as on a node that never lost the allocator:
// a fallback there is one the store never reserved, beside nodes it
// serves.
func TestAnOldOutageIsNoReasonToFallBack(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: a asks; the call fails", at: 0, do: func(g *rig) {
			v = g.decide("r", "a", 1)
			g.fail()
		}, want: func(g *rig) error {
			if !g.core.Down() || !g.core.DownAt(g.now()) {
				return fmt.Errorf("down %v, news %v after a failed call", g.core.Down(), g.core.DownAt(g.now()))
			}
			return verdict(v, false, false, true)
		}},
		{name: "t1: the outage is news: a new key falls back", at: 5 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "b", 1) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t2: the outage goes on: the retries keep it news", at: 3 * time.Second, do: func(g *rig) {
			outage(g, 3*time.Second)
			v = g.decide("r", "c", 1)
		}, want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t3: the allocator answers the retries: b and c report", at: 3100 * time.Millisecond, do: func(g *rig) {
			if err := untilOut(g, 10*time.Millisecond, 3500*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			g.answer()
		}, want: func(g *rig) error {
			if g.core.Down() {
				return fmt.Errorf("down after an answer")
			}
			return nil
		}},
		{name: "t4: a new key asks; the call fails; nothing asks after it", at: 20 * time.Second, do: func(g *rig) {
			g.decide("r", "d", 1)
			outage(g, 21*time.Second)
		}},
		{name: "t5: seconds later, no call since: a new key waits for its first lease", at: 30 * time.Second, do: func(g *rig) {
			if len(g.out) > 0 {
				t.Fatalf("%d calls out: the node still asks", len(g.out))
			}
			if !g.core.Down() || g.core.DownAt(g.now()) {
				t.Fatalf("down %v, news %v, want an old outage", g.core.Down(), g.core.DownAt(g.now()))
			}
			v = g.decide("r", "e", 1)
		}, want: func(g *rig) error {
			if len(g.out) == 0 {
				return fmt.Errorf("no call out for the new key")
			}
			return verdict(v, false, false, true)
		}},
		{name: "t6: answered: leased, no fallback", at: 30*time.Second + time.Millisecond, do: func(g *rig) {
			g.answer()
			v = g.key("r", "e").Decide(1, g.now(), g.clk.Now(), g.nodes, AfterWait)
		}, want: func(g *rig) error { return verdict(v, true, false, false) }},
	})
}
