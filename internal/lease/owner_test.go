package lease

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A key whose owner says its demand (a region, the sum of what its nodes
// say their callers ask) asks for a share by that demand, not by how often
// it is taken from, and says it in its requests; it is not quiet while the
// demand is above zero, however long nothing is taken; and when the demand
// falls well under its share it renews at once, giving the rest back to the
// key's other holders. (Rule r, 1000/s, refresh 100 ms; n2 holds 100/s.)
func TestOwnerSaysTheDemand(t *testing.T) {
	g := newRig(t, func(c *Config) { c.RoundTrip = func() time.Duration { return 60 * time.Millisecond } })
	k := func() *KeyLease { return g.key("r", "k") }
	asked := func(rate, demand float64) func(*rig) error {
		return func(g *rig) error {
			r, err := g.last("k")
			if err != nil {
				return err
			}
			if math.Abs(r.WantRate-rate) > 1e-6 || r.Demand != demand {
				return fmt.Errorf("last request asks %v/s and says %v/s, want %v/s and %v/s", r.WantRate, r.Demand, rate, demand)
			}
			return nil
		}
	}
	// tick answers every call out each 5 ms from from through to, and n2
	// renews its 100/s each 100 ms (it stays a holder).
	tick := func(from, to time.Duration) {
		for at := from; at <= to; at += 5 * time.Millisecond {
			g.through(at)
			g.answer()
			if at%(100*time.Millisecond) == 0 {
				g.acquireAs("n2", "r", "k", 0, 100)
			}
		}
	}
	var renewals int
	g.run([]step{
		{name: "t0: n2 holds 100/s; k's owner says 800/s; one request on k asks 1.1 of it, and says it", at: 0,
			do: func(g *rig) {
				g.acquireAs("n2", "r", "k", 0, 100)
				k().SetDemand(800)
				g.decide("r", "k", 1)
			},
			want: asked(880, 800)},
		{name: "t1: answered: 880/s, beside n2's", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if math.Abs(k().shareRate()-880) > 1e-6 || k().Holders() != 2 {
					return fmt.Errorf("share %v, %d holders", k().shareRate(), k().Holders())
				}
				renewals = len(g.requests("k"))
				return nil
			}},
		{name: "t2: the owner says 100/s: well under the share (asleep, it wakes)", at: 30 * time.Millisecond,
			do: func(g *rig) {
				k().SetDemand(100)
				g.turn() // (the Manager's loop turns on its inbox at once)
			}},
		{name: "t3: within a sweep, before its renewal was due, a request asks 110/s", at: 45 * time.Millisecond,
			want: func(g *rig) error {
				if n := len(g.requests("k")); n != renewals+1 {
					return fmt.Errorf("%d requests since the answer, want 1", n-renewals)
				}
				return asked(110, 100)(g)
			}},
		{name: "t4: answered: 110/s", at: 46 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if math.Abs(k().shareRate()-110) > 1e-6 {
					return fmt.Errorf("share %v", k().shareRate())
				}
				return nil
			}},
		{name: "t5: nothing taken for 2 s, answered as it asks: it stays, and keeps asking 110/s", at: 50 * time.Millisecond,
			do: func(g *rig) { tick(50*time.Millisecond, 2046*time.Millisecond) },
			want: func(g *rig) error {
				if k().phase == phaseLeft || g.table("r").Lookup("k") != k() {
					return fmt.Errorf("k left (phase %v)", k().phase)
				}
				if _, gone := g.returned("k"); gone {
					return fmt.Errorf("k gave its lease back")
				}
				if math.Abs(k().shareRate()-110) > 1e-6 {
					return fmt.Errorf("share %v", k().shareRate())
				}
				return asked(110, 100)(g)
			}},
		{name: "t6: the owner says 0", at: 2050 * time.Millisecond,
			do: func(g *rig) {
				k().SetDemand(0)
				g.turn()
			}},
		{name: "t7: answered as it asks, within a refresh a request asks for no share, and says no demand", at: 2055 * time.Millisecond,
			do: func(g *rig) {
				renewals = len(g.requests("k"))
				tick(2055*time.Millisecond, 2150*time.Millisecond)
			},
			want: func(g *rig) error {
				for _, r := range g.requests("k")[renewals:] {
					if r.WantRate == 0 && r.Demand == 0 {
						return nil
					}
				}
				return fmt.Errorf("no request asked for no share: %+v", g.requests("k")[renewals:])
			}},
	})
}
