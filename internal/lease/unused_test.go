package lease

import (
	"fmt"
	"testing"
	"time"
)

// Tokens that die unspent with their lease (Core.expire) go back with the
// key's next request, which leaves at once: the lease still holds at the
// store for about a sweep, and they are credited there. A window's go
// back only when they are its newest lease's, the only ones known to be of
// the window its returns name.

// TestUnspentTokensGoBackAtOnce: two leases of a token bucket; the older
// dies with tokens left while the newer holds.
func TestUnspentTokensGoBackAtOnce(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	var old, held int64
	g.run([]step{
		{name: "t0: k's first lease", at: 0, do: func(g *rig) { g.table("r").Key("k"); g.turn() }},
		{name: "t1: answered: 100 tokens, dying a sweep before 1 s", at: time.Millisecond,
			do: func(g *rig) { g.answer() }},
		{name: "t2: k runs low; its refill leaves and is answered", at: 400 * time.Millisecond,
			do: func(g *rig) {
				if err := runLow(g, "r", "k"); err != nil {
					t.Fatal(err)
				}
				old = k().Tokens()
				g.to(401 * time.Millisecond)
				g.to(402 * time.Millisecond)
				g.answer()
			},
			want: func(g *rig) error {
				if k().spans.k != 2 || k().spans.n[0] != old {
					return fmt.Errorf("spans %v, want the first lease's %d apart", k().spans.n[:k().spans.k], old)
				}
				return nil
			}},
		{name: "t3: one spent, from the older lease", at: 800 * time.Millisecond,
			do:   func(g *rig) { g.decide("r", "k", 1); old-- },
			want: func(g *rig) error { return calls(g) }},
		{name: "t4: a moment before the older lease's tokens die", at: 990*time.Millisecond - time.Microsecond,
			do:   func(g *rig) { held = k().Tokens() },
			want: func(g *rig) error { return calls(g) }},
		{name: "t5: they die, and go back at once", at: 990 * time.Millisecond,
			want: func(g *rig) error {
				if err := calls(g, []string{"k"}); err != nil {
					return err
				}
				r, _ := g.last("k")
				if r.Returned != old || r.Held != held {
					return fmt.Errorf("request %+v, want %d returned, held %d", r, old, held)
				}
				if n := k().Tokens(); n != held-old {
					return fmt.Errorf("holds %d, want the newer lease's %d", n, held-old)
				}
				return nil
			}},
	})
}

// TestWindowsUnspentTokensGoBackOnlyFromItsNewestLease: rule win (100 a
// 1 s window, a lease of 20). The first lease, answered late, dies before
// the second: its tokens die unreturned; the second's, the newest, go back
// at once, naming their window.
func TestWindowsUnspentTokensGoBackOnlyFromItsNewestLease(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("win", "k") }
	var old, newer int64
	g.run([]step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.table("win").Key("k"); g.turn() }},
		{name: "t1: applied and answered at 400 ms: its tokens die at 590 ms", at: 400 * time.Millisecond,
			do: func(g *rig) {
				g.answer()
				if err := runLow(g, "win", "k"); err != nil {
					t.Fatal(err)
				}
				old = k().Tokens()
			}},
		{name: "t2: the refill leaves and is answered: its tokens die at 989 ms", at: 401 * time.Millisecond,
			do: func(g *rig) { g.to(402 * time.Millisecond); g.answer(); newer = k().Tokens() - old },
			want: func(g *rig) error {
				if k().spans.k != 2 || k().spans.n[0] != old || k().spans.n[1] != newer {
					return fmt.Errorf("spans %v at %v, want [%d %d]", k().spans.n[:k().spans.k], k().spans.at[:k().spans.k], old, newer)
				}
				return nil
			}},
		{name: "t3: the first lease's tokens die, and nothing leaves", at: 590 * time.Millisecond,
			want: func(g *rig) error {
				if n := k().Tokens(); n != newer {
					return fmt.Errorf("holds %d, want the newer lease's %d", n, newer)
				}
				if k().req.unused != 0 {
					return fmt.Errorf("%d to give back, want none", k().req.unused)
				}
				return calls(g)
			}},
		{name: "t4: the newest lease's die: they go back at once, to their window", at: 989 * time.Millisecond,
			want: func(g *rig) error {
				if err := calls(g, []string{"k"}); err != nil {
					return err
				}
				r, _ := g.last("k")
				if r.Returned != newer || r.Held != newer || r.ReturnedEpoch != k().win.epoch.Load() {
					return fmt.Errorf("request %+v, want %d returned, held, of epoch %d", r, newer, k().win.epoch.Load())
				}
				return nil
			}},
		{name: "t5: the store takes them back out of the window", at: 989 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				// The first lease's 20 stay counted (what it left died
				// unreturned), the second's went back, and the answer's
				// grant is what k holds now.
				if rem, want := g.acquireAs("n2", "win", "k", 0, 0).Remaining, 100-20-k().Tokens(); rem != want {
					return fmt.Errorf("the window has %d left, want %d", rem, want)
				}
				return nil
			}},
	})
}

// TestWindowsUnusedTokensOfAnEndedWindowAreNotReturnedInTheNext: the
// newest lease's tokens die while a refill is out, and its answer comes in
// the next window: their window has ended, and returned under the new
// window's epoch they would be credited there and lent again.
func TestWindowsUnusedTokensOfAnEndedWindowAreNotReturnedInTheNext(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("win", "k") }
	var epoch int64
	g.run([]step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.table("win").Key("k"); g.turn() }},
		{name: "t1: answered: tokens dying at 989 ms, a sweep before the window's end", at: time.Millisecond,
			do: func(g *rig) { g.answer(); epoch = k().win.epoch.Load() }},
		{name: "t2: k runs low; its refill leaves and is not answered yet", at: 985 * time.Millisecond,
			do: func(g *rig) {
				if err := runLow(g, "win", "k"); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				g.to(986 * time.Millisecond)
				return calls(g, []string{"k"})
			}},
		{name: "t3: its tokens die; the refill is still out", at: 989 * time.Millisecond,
			want: func(g *rig) error {
				if k().Tokens() != 0 || k().req.unused == 0 {
					return fmt.Errorf("holds %d, %d to give back", k().Tokens(), k().req.unused)
				}
				return calls(g, []string{"k"})
			}},
		{name: "t4: answered in the next window", at: 1001 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k().win.epoch.Load() != epoch+1 {
					return fmt.Errorf("epoch %d, want %d", k().win.epoch.Load(), epoch+1)
				}
				return nil
			}},
		{name: "t5: its next request returns nothing of the ended window", at: 1002 * time.Millisecond,
			want: func(g *rig) error {
				r, err := g.last("k")
				if err != nil || len(g.requests("k")) != 3 || r.Returned != 0 {
					return fmt.Errorf("%d requests, the last %+v (%v): want a third returning nothing", len(g.requests("k")), r, err)
				}
				return nil
			}},
	})
}
