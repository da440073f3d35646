package lease

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A key whose lease ends while the allocator is down keeps its lease's
// tokens until they die, refuses until the lease may have ended at the
// store, then decides on an allowance that starts empty and earns rate/N
// from then (docs/bounds.md, rule 5); what it admits is reported with its
// next request, and what it admitted after that request left is paid from
// the grant.
func TestFallbackAfterALease(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	var v Verdict
	var served time.Duration
	g.run([]step{
		{name: "t0: first lease", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		{name: "t1: granted", at: time.Millisecond, do: func(g *rig) {
			g.answer()
			served = mono(k().served.Load()).sinceOrigin() - g.start
		}},
		{name: "t2: spent to the last token, then the allocator is cut off", at: 100 * time.Millisecond, do: func(g *rig) {
			for k().Tokens() > 0 {
				g.decide("r", "k", 1)
			}
			g.to(101 * time.Millisecond)
			g.fail()
		}},
		{name: "t3: down, and the lease may still be in force at the store", at: 500 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, false) }},
		{name: "t4: past the lease's latest end: an empty allowance", at: 1001 * time.Millisecond,
			do: func(g *rig) { v = g.decide("r", "k", 2) },
			want: func(g *rig) error {
				if served != 1001*time.Millisecond {
					return fmt.Errorf("served until %v, want the answer plus the TTL, 1.001s", served)
				}
				return verdict(v, false, true, false)
			}},
		{name: "t5: 2 ms of rate/N later", at: 1003 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "k", 2) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t6: the allocator back: the report leaves", at: 1100 * time.Millisecond, do: func(g *rig) {
			g.fail() // (the retries' backoff)
			for range 20 {
				if len(g.out) > 0 {
					break
				}
				g.to(g.now() - g.start + 50*time.Millisecond)
			}
		}, want: func(g *rig) error {
			if len(g.out) == 0 {
				return fmt.Errorf("no request out")
			}
			if got := g.out[len(g.out)-1].Requests[0].Consumed; got != 2 {
				return fmt.Errorf("reported %d consumed, want 2", got)
			}
			return nil
		}},
		{name: "t7: admitted in flight, paid from the grant", at: 1500 * time.Millisecond, do: func(g *rig) {
			v = g.decide("r", "k", 3) // (still on the allowance: its grant is not back)
			g.answer()
		}, want: func(g *rig) error {
			if err := verdict(v, true, true, false); err != nil {
				return err
			}
			if k().phase == phaseFallback || k().fallback.Load() != nil {
				return fmt.Errorf("phase %v after the grant", k().phase)
			}
			if k().req.owed != 0 {
				return fmt.Errorf("owes %d, want the grant to have paid the 3 admitted in flight", k().req.owed)
			}
			return nil
		}},
	})
}

// A failure: closed rule never admits without the allocator.
func TestClosedRuleNeverFallsBack(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: a call fails", at: 0, do: func(g *rig) { g.decide("closed", "other", 1); g.to(time.Millisecond); g.fail() }},
		{name: "t1: a new key of the closed rule", at: 2 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("closed", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, true, false) }},
	})
}

// A key told by the allocator to divide its fallback by more than the
// fleet's count (Grant.FallbackNodes: the first holder of a cold fleet
// keeps the whole rule until it asks again) divides by that, and says so
// with its next request, as what it may use until that answer arrives
// (docs/bounds.md, rule 5).
func TestFallbackDividesAsTold(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	var v Verdict
	g.run([]step{
		{name: "t0: another node holds the key first, told 1", at: 0, do: func(g *rig) {
			if gr := g.acquireAs("first", "r", "k", 0, 0); gr.FallbackNodes != 1 {
				t.Fatalf("the first holder told %d, want 1", gr.FallbackNodes)
			}
			g.decide("r", "k", 1)
		}},
		{name: "t1: this node's grant: no room left for its fallback", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if n := k().FallbackNodes(); n != math.MaxInt32 {
					return fmt.Errorf("told to divide by %d, want none (2^31-1)", n)
				}
				return nil
			}},
		{name: "t2: spent, and the allocator cut off", at: 100 * time.Millisecond, do: func(g *rig) {
			for k().Tokens() > 0 {
				g.decide("r", "k", 1)
			}
			g.to(101 * time.Millisecond)
			g.fail()
		}},
		{name: "t3: past the lease's end, a fleet of 1 would admit: nothing", at: 1500 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, true, false) }},
		{name: "t4: the allocator back: the request says what the fallback divided by", at: 1600 * time.Millisecond,
			do: func(g *rig) {
				for range 20 {
					if len(g.out) > 0 {
						break
					}
					g.to(g.now() - g.start + 50*time.Millisecond)
				}
			},
			want: func(g *rig) error {
				if len(g.out) == 0 {
					return fmt.Errorf("no request out")
				}
				if got := g.out[len(g.out)-1].Requests[0].FallbackNodes; got != math.MaxInt32 {
					return fmt.Errorf("the request says %d, want 2^31-1", got)
				}
				return nil
			}},
	})
}

// A request that leaves while the allocator is taken for down says so
// (Request.OnFallback): the key may admit on its fallback until its answer
// arrives, and the store keeps its reservation meanwhile though the
// request reports nothing. Sent again, it says what it said; once an
// answer comes, the next one does not.
func TestRequestsSentOnTheFallbackSaySo(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var first Request
	g.run([]step{
		{name: "t0: a's first request, answered", at: 0,
			do: func(g *rig) { g.decide("r", "a", 1); first, _ = g.last("a"); g.answer() },
			want: func(g *rig) error {
				if first.OnFallback {
					return fmt.Errorf("a request with the allocator up says it is on the fallback: %+v", first)
				}
				return nil
			}},
		{name: "t1: another key's call fails: the allocator is down", at: time.Millisecond,
			do: func(g *rig) { g.decide("r", "o", 1); g.fail() }},
		{name: "t2: a asks past its lease: its request leaves on the fallback", at: 2 * time.Millisecond,
			do: func(g *rig) {
				g.decide("r", "a", 1000)
				if err := untilOut(g, 5*time.Millisecond, 500*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				if r, _ := g.last("a"); !r.OnFallback || r.Consumed != 0 {
					return fmt.Errorf("sent while down: %+v, want on the fallback with nothing to report", r)
				}
				return nil
			}},
		{name: "t3: answered: the allocator is up, the next request is not", at: 600 * time.Millisecond,
			do: func(g *rig) {
				g.answer()
				g.decide("r", "a", 1000)
				if err := untilOut(g, 5*time.Millisecond, 2*time.Second); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				if r, _ := g.last("a"); r.OnFallback {
					return fmt.Errorf("sent with the allocator up: %+v", r)
				}
				return nil
			}},
	})
}

// A key whose owner says its fallback still uses more than the allocator
// last told it (SetUsing: a region whose nodes hold parts of an older,
// larger part) says so with its requests, the smaller divisor of the two;
// told nothing by its owner, it says what it was told.
func TestRequestsSayWhatTheOwnerStillUses(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	says := func(want uint32) func(g *rig) error {
		return func(g *rig) error {
			if len(g.out) == 0 {
				return fmt.Errorf("no request out")
			}
			if got := g.out[len(g.out)-1].Requests[0].FallbackNodes; uint32(got) != want {
				return fmt.Errorf("the request says %d, want %d", got, want)
			}
			return nil
		}
	}
	next := func() { // decides every 25 ms until the key's next request is out
		g.out = nil
		for range 40 {
			if len(g.out) > 0 {
				break
			}
			g.decide("r", "k", 1)
			g.to(g.now() - g.start + 25*time.Millisecond)
		}
	}
	g.run([]step{
		{name: "t0: two others hold the key; this node's grant tells it 3", at: 0, do: func(g *rig) {
			g.acquireAs("a", "r", "k", 0, 0)
			g.acquireAs("b", "r", "k", 0, 0)
			g.decide("r", "k", 1)
			g.answer()
		}, want: func(g *rig) error {
			if n := k().FallbackNodes(); n < 3 {
				return fmt.Errorf("told %d, want 3 or more", n)
			}
			return nil
		}},
		{name: "t1: its owner says it still uses a half: the next request says 2", at: time.Millisecond, do: func(g *rig) {
			k().SetUsing(2)
			next()
		}, want: says(2)},
		{name: "t2: its owner says no more: the request says what it was told", at: 2 * time.Second, do: func(g *rig) {
			g.answer()
			k().SetUsing(0)
			next()
		}, want: func(g *rig) error {
			if len(g.out) == 0 {
				return fmt.Errorf("no request out")
			}
			if got, told := g.out[len(g.out)-1].Requests[0].FallbackNodes, k().FallbackNodes(); int(got) != told {
				return fmt.Errorf("the request says %d, want what it was told, %d", got, told)
			}
			return nil
		}},
	})
}
