package lease

import (
	"fmt"
	"testing"
	"time"
)

// TakeUpTo takes what it can of what it is asked, marks the key spent as
// Take does, and says when the key has left its table.
func TestTakeUpTo(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	var held int64
	g.run([]step{
		{name: "t0: nothing leased", at: 0,
			do: func(g *rig) { k(); g.turn() },
			want: func(g *rig) error {
				if got := k().TakeUpTo(5); got != 0 {
					return fmt.Errorf("took %d before any lease", got)
				}
				return nil
			}},
		{name: "t1: granted", at: 10 * time.Millisecond, do: func(g *rig) { g.answer(); held = k().Tokens() },
			want: func(g *rig) error {
				if held < 10 {
					return fmt.Errorf("held %d after the grant", held)
				}
				return nil
			}},
		{name: "t2: a part, then the rest, then none", at: 20 * time.Millisecond,
			want: func(g *rig) error {
				if got := k().TakeUpTo(3); got != 3 {
					return fmt.Errorf("TakeUpTo(3) took %d", got)
				}
				if !k().is(bitSpent) {
					return fmt.Errorf("not marked spent")
				}
				if got := k().TakeUpTo(held + 100); got != held-3 {
					return fmt.Errorf("TakeUpTo(all) took %d, want %d", got, held-3)
				}
				if got := k().TakeUpTo(1); got != 0 || k().Tokens() != 0 {
					return fmt.Errorf("an empty key gave %d, holds %d", got, k().Tokens())
				}
				if got := k().TakeUpTo(0); got != 0 {
					return fmt.Errorf("TakeUpTo(0) took %d", got)
				}
				return nil
			}},
		{name: "t3: below its watermark, it asked for a refill", at: 30 * time.Millisecond,
			want: func(g *rig) error {
				if !k().is(bitQueued) {
					return fmt.Errorf("no refill asked for below the watermark")
				}
				return nil
			}},
		{name: "t4: the rule goes", at: 40 * time.Millisecond,
			do: func(g *rig) {
				old := k()
				g.core.Forget("r")
				g.answer() // (its refill was out: it leaves once answered)
				g.turn()
				if got := old.TakeUpTo(1); got != -1 {
					g.t.Fatalf("a key that left its table gave %d, want -1", got)
				}
			}},
	})
}

// LiveFor is the time to the earliest end of the key's leases as the Core
// counts them (a sweep before the request's send time plus its TTL), none
// before a lease or once it has ended, and the older lease's while two
// hold tokens.
func TestLiveFor(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	// Rule r: TTL 1s; the rig's sweep is 10 ms, so a lease asked for at
	// 0 ends at 990 ms.
	live := func(want time.Duration) func(*rig) error {
		return func(g *rig) error {
			if got := k().LiveFor(g.now()); got != want {
				return fmt.Errorf("LiveFor %v, want %v", got, want)
			}
			return nil
		}
	}
	g.run([]step{
		{name: "t0: asked", at: 0, do: func(g *rig) { k(); g.turn() }, want: live(0)},
		{name: "t1: granted 10 ms later", at: 10 * time.Millisecond, do: func(g *rig) { g.answer() }, want: live(980 * time.Millisecond)},
		{name: "t2: most tokens spent, a second lease asked for", at: 300 * time.Millisecond,
			do: func(g *rig) {
				n := k().Tokens()
				k().TakeUpTo(n - 2)
				g.turn()
			},
			want: live(690 * time.Millisecond)},
		{name: "t3: the second lease answered: the first still bounds", at: 310 * time.Millisecond,
			do: func(g *rig) { g.answer() }, want: live(680 * time.Millisecond)},
		{name: "t4: still in use", at: 600 * time.Millisecond, do: func(g *rig) { k().TakeUpTo(1) }, want: live(390 * time.Millisecond)},
		{name: "t5: still in use", at: 900 * time.Millisecond, do: func(g *rig) { k().TakeUpTo(1) }, want: live(90 * time.Millisecond)},
		{name: "t6: the first ends, the second bounds", at: 995 * time.Millisecond,
			want: func(g *rig) error {
				if got := k().LiveFor(g.now()); got != 296*time.Millisecond {
					return fmt.Errorf("LiveFor %v, want 296ms (the second lease, sent at 301 ms, a batch window after it was asked for)", got)
				}
				return nil
			}},
		{name: "t7: the Core late: an ended lease lives for nothing", at: 1000 * time.Millisecond,
			want: func(g *rig) error {
				if got := k().LiveFor(g.now() + 500*time.Millisecond); got != 0 {
					return fmt.Errorf("LiveFor past the end %v, want 0", got)
				}
				return nil
			}},
	})
}
