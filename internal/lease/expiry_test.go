package lease

import (
	"fmt"
	"testing"
	"time"
)

// spans charge spends to the oldest tokens and let each lease's tokens die
// at its own end: a new lease does not shorten what it brings to an older
// lease's end, nor lengthen what an older one left.
func TestSpans(t *testing.T) {
	t0 := monoAt(0)
	var s spans
	s.put(10, t0.Add(time.Second))
	s.put(20, t0.Add(2*time.Second))
	s.settle(4) // 4 spent: from the first lease
	if s.n[0] != 6 || s.n[1] != 20 {
		t.Fatalf("after 4 spent: %v, want [6 20]", s.n[:s.k])
	}
	if gone := s.expire(t0.Add(time.Second)); gone != 6 {
		t.Fatalf("the first lease's end took %d, want its 6", gone)
	}
	s.settle(12) // 8 more
	if s.n[0] != 12 {
		t.Fatalf("after 8 more: %v, want [12]", s.n[:s.k])
	}
	s.put(5, t0.Add(3*time.Second))
	s.put(5, t0.Add(4*time.Second))
	s.put(5, t0.Add(5*time.Second)) // a fourth: the two oldest merge, at the earlier end
	if s.k != maxSpans || s.n[0] != 17 || s.at[0] != t0.Add(2*time.Second) {
		t.Fatalf("merged: n %v at %v", s.n[:s.k], s.at[:s.k])
	}
	if !s.grow(3) || s.n[s.k-1] != 8 {
		t.Fatalf("a share's earnings go to the newest lease: %v", s.n[:s.k])
	}
}

// Tokens of a lease die a sweep before the lease may end at the store, and
// a key whose lease ended refuses until its next grant while the allocator
// answers.
func TestTokensDieWithTheirLease(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("win", "k") }
	g.run([]step{
		{name: "t0: first lease", at: 0, do: func(g *rig) { g.decide("win", "k", 1) }},
		{name: "t1: granted", at: 10 * time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k().Tokens() == 0 {
					return fmt.Errorf("no tokens after the grant")
				}
				return nil
			}},
		{name: "t2: a sweep before the window's end (the lease's)", at: 990 * time.Millisecond,
			want: func(g *rig) error {
				if n := k().Tokens(); n != 0 {
					return fmt.Errorf("%d tokens left past their lease", n)
				}
				return nil
			}},
	})
}

// A window key's tokens are not spent past their lease's end, even while
// the Core is late to take them out (a node whose loop runs late: the
// simulator's saturated node, 20 ms late, spent them in the next window,
// 101 of 100). The hot path reads when the oldest die; the Core, when it
// runs, takes them out.
func TestWindowTokensUnspentPastTheirEndWhileTheCoreIsLate(t *testing.T) {
	g := newRig(t, nil)
	k := func() *KeyLease { return g.key("win", "k") }
	g.decide("win", "k", 1)
	g.to(time.Millisecond)
	g.answer()
	if k().Tokens() == 0 {
		t.Fatal("no tokens granted")
	}
	end := mono(k().win.spendBy.Load())
	if end == 0 {
		t.Fatal("a window key's tokens say no end")
	}
	// The clock passes the end; the Core does not run.
	g.clk.Advance(end.Sub(monoAt(g.now())) + time.Millisecond)
	held := k().Tokens()
	if v := k().Decide(1, g.now(), g.clk.Now(), 1, FirstAttempt); v.Allowed {
		t.Fatalf("spent a token of a lease that ended %v ago, the Core late: %+v", time.Millisecond, v)
	}
	if k().Tokens() != held {
		t.Fatalf("tokens %d, want the %d the Core has not taken out yet, untouched", k().Tokens(), held)
	}
	// A token bucket's say nothing.
	g.decide("r", "b", 1)
	g.to(g.now() - g.start + time.Millisecond)
	g.answer()
	if g.key("r", "b").win.spendBy.Load() != 0 {
		t.Fatal("a token bucket's tokens say an end to the hot path")
	}
}
