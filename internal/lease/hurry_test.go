package lease

import (
	"fmt"
	"testing"
	"time"
)

// A key with a share waits for its renewal with its request queued, so
// that the hot path asks nothing meanwhile. Refused then, it asks at once
// (Core.hurry) when its last grant was whole: the allocator had tokens to
// spare. When its last grant fell short it waits: the centre had nothing
// more, and asking sooner would take other holders' shares. (Rule r: a
// first lease of 100 and a share of 1000/s; renewal ~110 ms after it left.)

// spend takes all of key's tokens, then is refused one, and turns.
func spend(g *rig, rule, key string) Verdict {
	k := g.key(rule, key)
	if n := k.Tokens(); n > 0 {
		if v := g.decide(rule, key, n); !v.Allowed {
			g.t.Fatalf("spending %d: %+v", n, v)
		}
	}
	return g.decide(rule, key, 1)
}

func TestRefusedAfterAWholeGrantAsksAtOnce(t *testing.T) {
	g := newRig(t, nil)
	k := func() *KeyLease { return g.key("r", "k") }
	var renewal time.Duration
	var v Verdict
	g.run([]step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		{name: "t1: answered whole: its renewal queued", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				renewal = mono(k().notBefore.Load()).sinceOrigin() - g.start
			},
			want: func(g *rig) error {
				if k().req.short || k().phase != phaseSharing || !k().is(bitQueued) || renewal < 80*time.Millisecond || renewal > 100*time.Millisecond {
					return fmt.Errorf("short %v, phase %v, queued %v, renewal at %v", k().req.short, k().phase, k().is(bitQueued), renewal)
				}
				return nil
			}},
		{name: "t2: spent and refused: no fallback, and it hurries", at: 5 * time.Millisecond,
			do: func(g *rig) { v = spend(g, "r", "k") },
			want: func(g *rig) error {
				if err := verdict(v, false, false, false); err != nil {
					return err
				}
				return calls(g)
			}},
		{name: "t3: its request leaves after the batch window, long before its renewal", at: 6 * time.Millisecond,
			want: func(g *rig) error {
				if err := calls(g, []string{"k"}); err != nil {
					return err
				}
				if r, _ := g.last("k"); r.Want == 0 {
					return fmt.Errorf("the hurried request %+v asks for no tokens", r)
				}
				return nil
			}},
	})
}

func TestRefusedAfterAShortGrantWaitsForItsRenewal(t *testing.T) {
	g := newRig(t, nil)
	k := func() *KeyLease { return g.key("r", "k") }
	var renewal time.Duration
	var v Verdict
	g.run([]step{
		{name: "t0: n2 empties the bucket; k's first request", at: 0,
			do: func(g *rig) {
				g.acquireAs("n2", "r", "k", 500, 0)
				g.acquireAs("n2", "r", "k", 500, 0)
				g.decide("r", "k", 1)
			}},
		{name: "t1: answered short, with a share", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				renewal = mono(k().notBefore.Load()).sinceOrigin() - g.start
			},
			want: func(g *rig) error {
				if !k().req.short || k().phase != phaseSharing || !k().is(bitQueued) || renewal < 80*time.Millisecond || renewal > 100*time.Millisecond {
					return fmt.Errorf("short %v, phase %v, queued %v, renewal at %v", k().req.short, k().phase, k().is(bitQueued), renewal)
				}
				return nil
			}},
		{name: "t2: spent and refused", at: 2 * time.Millisecond,
			do:   func(g *rig) { v = spend(g, "r", "k") },
			want: func(g *rig) error { return verdict(v, false, false, false) }},
		{name: "t3: nothing leaves after the batch window", at: 3 * time.Millisecond,
			want: func(g *rig) error { return calls(g) }},
		{name: "t4: refused again and again: nothing until its renewal", at: 4 * time.Millisecond,
			do: func(g *rig) {
				for at := 4 * time.Millisecond; at < renewal; at += 5 * time.Millisecond {
					g.to(at)
					spend(g, "r", "k")
					if len(g.out) > 0 {
						t.Fatalf("a request left at %v, before its renewal at %v", at, renewal)
					}
				}
			}},
		{name: "t5: its renewal", at: 100 * time.Millisecond,
			do:   func(g *rig) { g.to(renewal) },
			want: func(g *rig) error { return calls(g, []string{"k"}) }},
	})
}
