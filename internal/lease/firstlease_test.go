package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A key with no lease yet waits for its first while the allocator answers,
// and falls back only once a call has failed (docs/bounds.md, rule 1): a
// cold fleet, each node assuming it is alone, cannot spend a burst per node.
func TestNewKeyWaitsForItsFirstLease(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: a new key's first request", at: 0,
			do:   func(g *rig) { v = g.decide("api", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, true) }},
		{name: "t0: its request leaves at once: its caller waits on it", at: 0,
			want: func(g *rig) error {
				if len(g.out) != 1 {
					return fmt.Errorf("%d calls out, want 1", len(g.out))
				}
				return nil
			}},
		{name: "t1: still waiting while it is on its way", at: time.Millisecond,
			do: func(g *rig) { v = g.key("api", "k").Decide(1, g.now(), g.clk.Now(), 1, AfterWait) },
			want: func(g *rig) error {
				if k := g.key("api", "k"); k.phase != phaseNew {
					return fmt.Errorf("phase %v, want new", k.phase)
				}
				return verdict(v, false, false, true)
			}},
		{name: "t2: answered", at: 2 * time.Millisecond,
			do: func(g *rig) { g.answer(); v = g.decide("api", "k", 1) },
			want: func(g *rig) error {
				if err := verdict(v, true, false, false); err != nil {
					return err
				}
				if k := g.key("api", "k"); k.phase != phaseLeased && k.phase != phaseSharing {
					return fmt.Errorf("phase %v, want leased", k.phase)
				}
				return nil
			}},
	})
}

// A new key while the allocator is down decides on a full allowance at once.
func TestNewKeyFallsBackOnceTheAllocatorIsDown(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: another key's call fails", at: 0,
			do: func(g *rig) { g.decide("api", "other", 1); g.to(time.Millisecond); g.fail() }},
		{name: "t1: a new key decides on its full allowance", at: 2 * time.Millisecond,
			do: func(g *rig) { v = g.decide("api", "k", 200) },
			want: func(g *rig) error {
				if err := verdict(v, true, true, false); err != nil {
					return err
				}
				if k := g.key("api", "k"); k.phase != phaseFallback {
					return fmt.Errorf("phase %v, want fallback", k.phase)
				}
				return nil
			}},
		{name: "t1: and no more than its burst", at: 2 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("api", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, true, false) }},
	})
}

// A served key that runs dry refuses while the allocator answers, however
// long its renewal takes: it never decides on a fallback meanwhile.
func TestServedKeyNeverFallsBackWhileTheAllocatorAnswers(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var v Verdict
	g.run([]step{
		{name: "t0: first lease", at: 0, do: func(g *rig) { g.decide("win", "k", 1); g.to(time.Millisecond); g.answer() }},
		{name: "t1: spent", at: 2 * time.Millisecond, do: func(g *rig) {
			for g.decide("win", "k", 1).Allowed {
			}
		}},
		{name: "t2: long past its lease's end, its renewal still on its way", at: 5 * time.Second,
			do:   func(g *rig) { v = g.decide("win", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, false) }},
	})
}

// A new key's first call that times out is no news of an outage: the
// allocator may be slow under load, serving the fleet's other nodes, and a
// fallback here is one the store never reserved (a cold fleet's stampede
// passed 126 of 100 as first calls timed out). The key waits for its
// retry; only a second call timed out in a row makes it fall back.
func TestNewKeyTakesOneTimeoutForASlowAllocator(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: a new key's first request", at: 0,
			do:   func(g *rig) { v = g.decide("api", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, true) }},
		{name: "t250: its call times out: the key still waits", at: 250 * time.Millisecond,
			do: func(g *rig) {
				g.failWith(status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
				v = g.key("api", "k").Decide(1, g.now(), g.clk.Now(), 1, AfterWait)
			},
			want: func(g *rig) error {
				if !g.core.DownAt(g.now()) {
					return fmt.Errorf("the failure is not news")
				}
				return verdict(v, false, false, true)
			}},
		{name: "t400: its retry has left", at: 400 * time.Millisecond,
			do: func(g *rig) { g.through(450 * time.Millisecond) },
			want: func(g *rig) error {
				if len(g.out) != 1 {
					return fmt.Errorf("%d calls out, want the retry", len(g.out))
				}
				return nil
			}},
		{name: "t700: the retry times out too: now it falls back", at: 700 * time.Millisecond,
			do: func(g *rig) {
				g.failWith(context.DeadlineExceeded)
				v = g.key("api", "k").Decide(1, g.now(), g.clk.Now(), 1, AfterWait)
			},
			want: func(g *rig) error { return verdict(v, true, true, false) }},
	})
}

// A slow first answer after a timeout serves the key, which never fell back.
func TestNewKeyServedAfterATimeoutNeverFellBack(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: a new key's first request", at: 0,
			do: func(g *rig) { g.decide("api", "k", 1) }},
		{name: "t250: it times out", at: 250 * time.Millisecond,
			do: func(g *rig) { g.failWith(context.DeadlineExceeded) }},
		{name: "t250: a caller decides again: it waits", at: 250 * time.Millisecond,
			do:   func(g *rig) { v = g.key("api", "k").Decide(1, g.now(), g.clk.Now(), 1, AfterWait) },
			want: func(g *rig) error { return verdict(v, false, false, true) }},
		{name: "t400: the retry is answered: served", at: 400 * time.Millisecond,
			do: func(g *rig) {
				g.through(450 * time.Millisecond)
				g.answer()
				v = g.key("api", "k").Decide(1, g.now(), g.clk.Now(), 1, AfterWait)
			},
			want: func(g *rig) error {
				if g.core.Down() {
					return fmt.Errorf("down after an answer")
				}
				return verdict(v, true, false, false)
			}},
	})
}

// The demand that waited on a key's first lease is read over the wait: 50
// requests over 200 ms are 250 a second, not a surge of 50 in the instant
// the waiters decide again (sampled at the answer, the wait read as no
// demand and the next request said 2,439/s, its lease ten times what the
// key could spend).
func TestFirstLeaseReadsWhatWaitedOverTheWait(t *testing.T) {
	g := newRig(t, nil)
	steps := []step{{name: "t0: a new key's first request leaves", at: 0,
		do: func(g *rig) { g.decide("win", "k", 1) }}}
	for i := 1; i < 50; i++ {
		at := time.Duration(i) * 4 * time.Millisecond
		steps = append(steps, step{name: fmt.Sprintf("t%d: another waits", i), at: at,
			do: func(g *rig) { g.decide("win", "k", 1) }})
	}
	steps = append(steps, step{name: "t200ms: answered; the 50 decide again", at: 200 * time.Millisecond,
		do: func(g *rig) {
			g.answer()
			k := g.key("win", "k")
			for range 50 {
				k.Decide(1, g.now(), g.clk.Now(), 1, AfterWait)
			}
			g.turn()
		}},
		step{name: "t201ms: the next request says about 250/s", at: 201 * time.Millisecond,
			do: func(g *rig) { g.key("win", "k").WantRefill(); g.turn() },
			want: func(g *rig) error {
				req, err := g.last("k")
				if err != nil {
					return err
				}
				if len(g.requests("k")) < 2 {
					return fmt.Errorf("%d requests, want a second", len(g.requests("k")))
				}
				if req.Demand < 125 || req.Demand > 500 {
					return fmt.Errorf("demand %.0f/s, want about 250", req.Demand)
				}
				return nil
			}})
	g.run(steps)
}

// A key's first request, far from the allocator, asks for its node's part
// of the rule's rate at once, and says what it divided by: the node may be
// the first of a cold fleet, which counts itself alone, and the allocator,
// which counts the live nodes, divides by its count instead
// (Request.WantRateNodes). Its later requests ask by the demand they
// measure, and say nothing of it. (Rule r, 1000/s; four nodes known;
// 300 ms away.)
func TestFirstAskSaysWhatItDividedBy(t *testing.T) {
	g := newRig(t, func(c *Config) {
		c.Nodes = func() int { return 4 }
		c.RoundTrip = func() time.Duration { return 300 * time.Millisecond }
	})
	asked := func(rate float64, nodes int) func(*rig) error {
		return func(g *rig) error {
			r, err := g.last("k")
			if err != nil {
				return err
			}
			if r.WantRate != rate || r.WantRateNodes != nodes {
				return fmt.Errorf("last request asks %v/s divided by %d, want %v/s by %d", r.WantRate, r.WantRateNodes, rate, nodes)
			}
			return nil
		}
	}
	g.run([]step{
		{name: "t0: the first request asks a quarter of the rate, divided by 4", at: 0,
			do:   func(g *rig) { g.decide("r", "k", 1) },
			want: asked(250, 4)},
		{name: "t1: answered; busy for a second, its next requests ask by what it measured", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				for at := 2 * time.Millisecond; at <= time.Second; at += 2 * time.Millisecond {
					g.through(at)
					g.decide("r", "k", 1)
					g.answer()
				}
			},
			want: func(g *rig) error {
				reqs := g.requests("k")
				if len(reqs) < 2 {
					return fmt.Errorf("%d requests, want a renewal", len(reqs))
				}
				for _, r := range reqs[1:] {
					if r.WantRateNodes != 0 {
						return fmt.Errorf("a renewal says it divided by %d (asks %v/s), want 0", r.WantRateNodes, r.WantRate)
					}
				}
				return nil
			}},
	})
}

// A key whose callers waited on its first lease is busy when the lease
// arrives, before the woken callers decide again: the Core does not take
// it for quiet, which would have it renew at once to give back the share
// its first request asked for (a node's workers on a key 200 ms away did,
// and the fleet lent each node its share a round trip later). (Rule r,
// 1000/s, TTL 1 s; n2 holds 100/s of it; 200 ms away.)
func TestFirstLeaseIsNotQuietWhileItsCallersWake(t *testing.T) {
	g := newRig(t, func(c *Config) { c.RoundTrip = func() time.Duration { return 200 * time.Millisecond } })
	k := func() *KeyLease { return g.key("r", "k") }
	g.run([]step{
		{name: "t0: n2 holds a share; a new key's caller waits on its first lease", at: 0,
			do: func(g *rig) {
				g.acquireAs("n2", "r", "k", 0, 100)
				g.decide("r", "k", 1)
			}},
		{name: "t1: its answer arrives 200 ms on, with a share, before the key's first look (at a quarter of its TTL); before the Core turns, the key is busy", at: 200 * time.Millisecond,
			do: func(g *rig) {
				out := g.out
				g.out = nil
				for _, c := range out {
					g.bring(c) // (no turn)
				}
			},
			want: func(g *rig) error {
				if rate := k().shareRate(); rate <= 0 {
					return fmt.Errorf("share %v/s, want the one it was lent", rate)
				}
				if k().quiet(&g.core.env, monoAt(g.now())) {
					return fmt.Errorf("the key is quiet: it would give its share back at once")
				}
				return nil
			}},
	})
}
