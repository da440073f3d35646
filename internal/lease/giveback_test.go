package lease

import (
	"fmt"
	"testing"
	"time"
)

// A key gone quiet whose share other nodes hold too gives it back at once,
// in the sweep (giveBack), rather than at its renewal: a request that asks
// for no rate, during which the key is GivingBack, and whose answer lends
// it none. The other holders have it from their next request. (A key's
// quiet is three of its inter-arrival times: after a burst of 100 in 10 ms,
// 30 ms.)
func TestQuietKeyWithOtherHoldersGivesItsShareBack(t *testing.T) {
	g := newRig(t, nil)
	k := func() *KeyLease { return g.key("r", "k") }
	var renewal time.Duration
	g.run([]step{
		{name: "t0: n2 holds half the rate; k's first request asks for all of it", at: 0,
			do: func(g *rig) {
				if got := g.acquireAs("n2", "r", "k", 0, 500); got.Rate != 500 {
					t.Fatalf("n2 granted %+v", got)
				}
				g.decide("r", "k", 1)
			},
			want: func(g *rig) error {
				if r, _ := g.last("k"); r.WantRate != 1000 {
					return fmt.Errorf("first request %+v", r)
				}
				return nil
			}},
		{name: "t1: answered: the other half, two holders", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				renewal = mono(k().notBefore.Load()).sinceOrigin() - g.start
			},
			want: func(g *rig) error {
				if k().phase != phaseSharing || k().shareRate() != 500 || k().Holders() != 2 {
					return fmt.Errorf("phase %v, share %v, holders %d", k().phase, k().shareRate(), k().Holders())
				}
				return nil
			}},
		{name: "t2: a burst: its lease spent at once", at: 10 * time.Millisecond,
			do: func(g *rig) {
				if v := g.decide("r", "k", 100); !v.Allowed {
					t.Fatalf("the burst: %+v", v)
				}
			},
			want: func(g *rig) error { return calls(g) }},
		{name: "t3: quiet since t2, long before its renewal: its share goes back", at: 11 * time.Millisecond,
			do: func(g *rig) {
				if err := untilOut(g, time.Millisecond, 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				if at := g.now() - g.start; at >= renewal {
					return fmt.Errorf("given back at %v, its renewal's time (%v)", at, renewal)
				}
				if r, _ := g.last("k"); r.WantRate != 0 {
					return fmt.Errorf("the give-back asks %+v", r)
				}
				if k().phase != phaseGivingBack {
					return fmt.Errorf("phase %v while it gives back", k().phase)
				}
				return calls(g, []string{"k"})
			}},
		{name: "t4: answered: no share, back on tokens", at: 60 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k().phase != phaseLeased || k().shareRate() != 0 || g.core.sharing.has(k()) {
					return fmt.Errorf("phase %v, share %v, in the sweep %v", k().phase, k().shareRate(), g.core.sharing.has(k()))
				}
				return nil
			}},
		{name: "t5: n2 asks again: it has the whole rate", at: 70 * time.Millisecond,
			want: func(g *rig) error {
				if got := g.acquireAs("n2", "r", "k", 0, 1000); got.Rate != 1000 {
					return fmt.Errorf("n2 granted %+v, want the whole rate", got)
				}
				return nil
			}},
	})
}
