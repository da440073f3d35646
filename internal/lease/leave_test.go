package lease

import (
	"fmt"
	"testing"
	"time"
)

// Keys that leave on their own: idle for half a TTL, or quiet with a share
// only they hold. Each says so to the allocator with a Release, tokens or
// not, so that it is not taken for a holder cut off on its fallback, whose
// part of the rule is kept for it (docs/bounds.md, rule 4).

// leftWith checks that key left its table and that the node's Release said so,
// giving back tokens and saying it held as many.
func leftWith(g *rig, rule, key string, tokens int64) error {
	if g.table(rule).Lookup(key) != nil {
		return fmt.Errorf("%s is still in its table", key)
	}
	ret, ok := g.returned(key)
	if !ok {
		return fmt.Errorf("%s left without a Release", key)
	}
	if ret.Tokens != tokens || ret.Held != tokens {
		return fmt.Errorf("%s returned %+v, want %d tokens, held %d", key, ret, tokens, tokens)
	}
	return nil
}

// A key with no demand for half its TTL leaves, and its Release goes at
// once, naming it though it holds nothing: the allocator forgets it as a
// holder. (Rule small: a TTL of 2 s, burst 5; another node holds the
// whole burst, so the key's grant is none.)
func TestIdleKeyLeavesAndReleasesEvenEmpty(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var v Verdict
	g.run([]step{
		{name: "t0: n2 holds the whole burst; k's first request", at: 0,
			do: func(g *rig) {
				if got := g.acquireAs("n2", "small", "k", 5, 0); got.Granted != 5 {
					t.Fatalf("n2 granted %+v", got)
				}
				v = g.decide("small", "k", 1)
			},
			want: func(g *rig) error { return verdict(v, false, false, true) }},
		{name: "t1: answered with nothing: k is served, and refuses", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				k := g.key("small", "k")
				if k.phase != phaseLeased || k.Tokens() != 0 || k.Holders() != 2 {
					return fmt.Errorf("phase %v, %d tokens, %d holders", k.phase, k.Tokens(), k.Holders())
				}
				return nil
			}},
		{name: "t2: a moment before half its TTL, still there", at: time.Second - time.Millisecond,
			want: func(g *rig) error {
				if g.table("small").Lookup("k") == nil || len(g.rets) != 0 {
					return fmt.Errorf("left early: returns %+v", g.rets)
				}
				return nil
			}},
		{name: "t3: half its TTL after its last demand (t0, or t1 that saw it), gone with a Release of nothing", at: 1001 * time.Millisecond,
			want: func(g *rig) error {
				if err := leftWith(g, "small", "k", 0); err != nil {
					return err
				}
				if g.core.Keys() != 0 {
					return fmt.Errorf("%d keys held", g.core.Keys())
				}
				return nil
			}},
		{name: "t4: the allocator counts n2 alone", at: 1002 * time.Millisecond,
			want: func(g *rig) error {
				if h := g.acquireAs("n2", "small", "k", 0, 0).Holders; h != 1 {
					return fmt.Errorf("%d holders, want n2 alone", h)
				}
				return nil
			}},
	})
}

// A key holding a share of the rate no other node holds leaves once it
// has been quiet for two refresh intervals when its renewal comes (lapse),
// rather than letting the share run out at the allocator; its Release
// gives back its tokens and what the share earned beyond its cap, and
// ends its share there. (Rule r: 1000/s, a refresh of 100 ms; the
// allocator measured far, so that the key wants a share while it is busy.)
func TestLapsingShareLeavesAndReleases(t *testing.T) {
	g := newRig(t, func(c *Config) { c.RoundTrip = func() time.Duration { return 60 * time.Millisecond } })
	k := func() *KeyLease { return g.key("r", "k") }
	const lastUse = 80 * time.Millisecond
	var holds int64
	g.run([]step{
		{name: "t0: k's first request asks for the node's part of the rate", at: 0,
			do: func(g *rig) { g.decide("r", "k", 1) },
			want: func(g *rig) error {
				if r, _ := g.last("k"); r.WantRate != 1000 {
					return fmt.Errorf("first request %+v, want a rate of 1000", r)
				}
				return nil
			}},
		{name: "t1: answered: it shares", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k().phase != phaseSharing || k().shareRate() != 1000 || k().Holders() != 1 {
					return fmt.Errorf("phase %v, share %v, holders %d", k().phase, k().shareRate(), k().Holders())
				}
				return nil
			}},
		{name: "t2: used every 20 ms until t2", at: lastUse,
			do: func(g *rig) {
				for at := 20 * time.Millisecond; at <= lastUse; at += 20 * time.Millisecond {
					g.to(at)
					g.decide("r", "k", 1)
				}
			}},
		{name: "t3: renews its share while its last use is under two refreshes old, then leaves", at: lastUse + time.Millisecond,
			do: func(g *rig) {
				for {
					for len(g.out) == 0 && len(g.rets) == 0 {
						if g.now()-g.start > time.Second {
							t.Fatal("neither renewed nor left by 1 s")
						}
						g.to(g.now() - g.start + time.Millisecond)
					}
					if len(g.rets) > 0 {
						return
					}
					r, _ := g.last("k")
					if quiet := g.now() - g.start - lastUse; r.WantRate == 0 || quiet >= 200*time.Millisecond {
						t.Fatalf("renewal %+v after %v quiet", r, quiet)
					}
					g.answer()
					holds = k().Tokens()
				}
			},
			want: func(g *rig) error {
				if quiet := g.now() - g.start - lastUse; quiet < 200*time.Millisecond {
					return fmt.Errorf("left after %v quiet", quiet)
				}
				if n := len(g.requests("k")); n < 2 {
					return fmt.Errorf("%d requests, want a renewal at least", n)
				}
				ret, ok := g.returned("k")
				if !ok || ret.Tokens < holds || ret.Held != ret.Tokens {
					return fmt.Errorf("returned %+v, want its %d tokens at least, and held as many", ret, holds)
				}
				return leftWith(g, "r", "k", ret.Tokens)
			}},
		{name: "t4: the share is free: another node gets the whole rate", at: 500 * time.Millisecond,
			want: func(g *rig) error {
				if got := g.acquireAs("n2", "r", "k", 0, 1000); got.Rate != 1000 || got.Holders != 1 {
					return fmt.Errorf("n2 granted %+v, want the whole rate, alone", got)
				}
				return nil
			}},
	})
}

// A key used every 400 ms, under half its TTL apart, has demand within
// every idle period: it stays, the same lease, and is never released.
func TestKeyUsedWithinHalfATTLStays(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var k *KeyLease
	var steps []step
	steps = append(steps,
		step{name: "t0: k's first request", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		step{name: "t1: answered; the caller is served", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				k = g.key("r", "k")
				k.Decide(1, g.now(), g.clk.Now(), 1, AfterWait)
				g.turn()
			}})
	for i := 1; i <= 5; i++ {
		at := time.Duration(i) * 400 * time.Millisecond
		steps = append(steps, step{name: fmt.Sprintf("t%d: used at %v", i+1, at), at: at,
			do: func(g *rig) {
				g.answer() // (whatever refill is out)
			},
			want: func(g *rig) error {
				if k.phase == phaseLeft || len(g.rets) != 0 {
					return fmt.Errorf("k left (returns %+v)", g.rets)
				}
				if v := k.Decide(1, g.now(), g.clk.Now(), 1, FirstAttempt); !v.Allowed {
					return fmt.Errorf("refused: %+v", v)
				}
				g.turn()
				return nil
			}})
	}
	g.run(steps)
}

// A window key idle for half its TTL stays while its lease may still be in
// force, and leaves after: the store counts it present in the lease's
// window, and a key made again there, the allocator down, would fall back
// on a full allowance the store never kept room for. (Rule win10: 100 in
// 10 s, a TTL of 1 s the window does not cut short.)
func TestWindowKeyStaysWhileItsLeaseMayBeInForce(t *testing.T) {
	g := newRig(t, nil)
	g.run([]step{
		{name: "t0: k's first request, answered: a lease of 1 s", at: 0,
			do: func(g *rig) { g.decide("win10", "k", 1); g.answer() }},
		{name: "t700ms: idle for more than half its TTL, its lease in force: it stays", at: 700 * time.Millisecond,
			want: func(g *rig) error {
				if g.table("win10").Lookup("k") == nil {
					return fmt.Errorf("k left with its lease in force")
				}
				return nil
			}},
		{name: "t1.1s: its lease over: it leaves, and says so", at: 1100 * time.Millisecond,
			do: func(g *rig) { g.through(1100*time.Millisecond + releaseGap) },
			want: func(g *rig) error {
				if g.table("win10").Lookup("k") != nil {
					return fmt.Errorf("k still in its table after its lease")
				}
				if _, ok := g.returned("k"); !ok {
					return fmt.Errorf("k left without a Release")
				}
				return nil
			}},
	})
}
