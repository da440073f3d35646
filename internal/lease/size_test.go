package lease

import (
	"fmt"
	"testing"
	"time"
)

// A lease's size follows the key's demand, and demand it refused at least
// doubles it, until the lease keeps up: unless the last grant fell short,
// when the allocator had nothing more and a larger lease would only hold
// back from the other holders what the key cannot use. (Rule r, tokens
// only: a first lease of 100 whose size falls to 50 with no demand.)

// sizeSteps: k's refill is out, k spends what it holds and is refused one;
// the refill's answer is whole, or, when short, another node's report of
// its fallback has emptied the bucket first.
func sizeSteps(t *testing.T, short bool, check func(g *rig, before int64) error) []step {
	var before int64
	return []step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.table("r").Key("k"); g.turn() }},
		{name: "t1: answered: 100 tokens", at: time.Millisecond, do: func(g *rig) { g.answer() }},
		{name: "t2: k runs low: its refill leaves, asking for its size", at: 300 * time.Millisecond,
			do: func(g *rig) {
				if err := runLow(g, "r", "k"); err != nil {
					t.Fatal(err)
				}
				g.to(301 * time.Millisecond)
			},
			want: func(g *rig) error {
				r, err := g.last("k")
				if before = g.key("r", "k").est.size; err != nil || r.Want != before {
					return fmt.Errorf("refill %+v (%v), size %d", r, err, before)
				}
				return nil
			}},
		{name: "t3: spent while it is out, and refused one", at: 302 * time.Millisecond,
			do: func(g *rig) {
				if v := spend(g, "r", "k"); v.Allowed || v.Fallback {
					t.Fatalf("refusal: %+v", v)
				}
			}},
		{name: "t4: answered", at: 400 * time.Millisecond,
			do: func(g *rig) {
				if short {
					for range 2 { // (a report is debited up to the node's part of the burst)
						g.requestAs("n2", Request{Rule: "r", Key: "k", Consumed: 1000})
					}
				}
				g.answer()
			},
			want: func(g *rig) error {
				if k := g.key("r", "k"); k.req.short != short {
					return fmt.Errorf("short %v, want %v", k.req.short, short)
				}
				return check(g, before)
			}},
	}
}

func TestLeaseSizeDoublesOnRefusalsAfterAWholeGrant(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	g.run(sizeSteps(t, false, func(g *rig, before int64) error {
		k := g.key("r", "k")
		if k.est.size < 2*before || k.low.Load() != watermark(k.est.size) {
			return fmt.Errorf("size %d (watermark %d), want twice %d at least", k.est.size, k.low.Load(), before)
		}
		return nil
	}))
}

func TestLeaseSizeDoesNotDoubleAfterAShortGrant(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	g.run(sizeSteps(t, true, func(g *rig, before int64) error {
		if k := g.key("r", "k"); k.Tokens() != 0 || k.est.size >= 2*before {
			return fmt.Errorf("granted %d, size %d, want under twice %d", k.Tokens(), k.est.size, before)
		}
		return nil
	}))
}

// The demand that waited for a key's first lease is what that lease was
// asked for (request.go): a whole first grant met it, and it is no refusal.
// A key touched once then costs one Acquire, as lapse's comment says.
func TestDemandThatWaitedForTheFirstLeaseIsNoRefusal(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var v Verdict
	g.run([]step{
		{name: "t0: a caller asks k for 1 token: it waits", at: 0,
			do:   func(g *rig) { v = g.decide("r", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, true) }},
		{name: "t1: answered whole, 100 tokens", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k := g.key("r", "k"); k.Tokens() != 100 || k.req.starved || k.est.size > 100 {
					return fmt.Errorf("%d tokens, size %d, starved %v", k.Tokens(), k.est.size, k.req.starved)
				}
				return nil
			}},
		{name: "t1: the caller decides again and is served", at: time.Millisecond,
			do:   func(g *rig) { v = g.key("r", "k").Decide(1, g.now(), g.clk.Now(), 1, AfterWait); g.turn() },
			want: func(g *rig) error { return verdict(v, true, false, false) }},
		{name: "t2: 99 tokens left: no second request", at: 10 * time.Millisecond,
			want: func(g *rig) error {
				if n := len(g.requests("k")); n != 1 {
					r, _ := g.last("k")
					return fmt.Errorf("%d requests, the last %+v", n, r)
				}
				return nil
			}},
	})
}
