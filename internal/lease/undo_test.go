package lease

import (
	"fmt"
	"testing"
	"time"
)

// Tokens given back after the Core charged them to a lease's span go back
// to the oldest span, which dies first, and die with it; when the span
// they were charged to has gone, they do not come back at all. Before,
// they were counted in no span and lived on to the newest lease's end.
func TestSpansTakeBackWhatIsGivenBack(t *testing.T) {
	t0 := monoAt(0)
	var s spans
	s.put(10, t0.Add(time.Second))
	s.put(20, t0.Add(2*time.Second))
	if s.settle(4) || s.n[0] != 6 || s.n[1] != 20 {
		t.Fatalf("4 spent: %v, want [6 20] with no span gone", s.n[:s.k])
	}
	if s.settle(1) || s.n[0] != 9 {
		t.Fatalf("3 given back: %v, want [9 20], to the oldest", s.n[:s.k])
	}
	if gone := s.expire(t0.Add(time.Second)); gone != 9 {
		t.Fatalf("the first lease's end took %d, want its 9, what was given back among them", gone)
	}
	s.put(5, t0.Add(3*time.Second))
	if !s.settle(1+20) || s.k != 1 || s.n[0] != 5 {
		t.Fatalf("the first span spent out: %v, want it gone and reported", s.n[:s.k])
	}
}

// A request undone after the Core charged its tokens: they die at their
// own lease's end, not at a later lease's. (Rule r, tokens only: a first
// lease, spent below its watermark; the refill's lease ends later.)
func TestUndoneTokensDieWithTheirLease(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	var v Verdict
	var n, refill, spent int64
	var firstEnd time.Duration
	g.run([]step{
		{name: "t0: first lease", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		{name: "t1: granted", at: time.Millisecond, do: func(g *rig) {
			g.answer()
			at, _ := k().spans.next()
			firstEnd = at.sinceOrigin() - g.start
		}},
		{name: "t2: all but one taken by one request; the refill is answered, its lease ending later", at: 100 * time.Millisecond, do: func(g *rig) {
			n = k().Tokens() - 1
			if v = g.decide("r", "k", n); !v.Allowed {
				t.Fatalf("taking %d: %+v", n, v)
			}
			if err := untilOut(g, time.Millisecond, 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			before := k().Tokens()
			g.answer()
			refill = k().Tokens() - before
		}, want: func(g *rig) error {
			if k().spans.k != 2 || refill <= 0 || k().spans.n[0] != 1 {
				return fmt.Errorf("spans %v, refill %d: want the first lease's 1 and the refill's", k().spans.n[:k().spans.k], refill)
			}
			return nil
		}},
		{name: "t3: the request does not go ahead: its tokens come back", at: 300 * time.Millisecond, do: func(g *rig) {
			if got := k().Undo(v, n); got != n {
				t.Fatalf("%d of %d given back", got, n)
			}
		}},
		{name: "t4: busy, one token every 50 ms, to the first lease's end: what came back of it dies with it", at: 350 * time.Millisecond, do: func(g *rig) {
			for at := 350 * time.Millisecond; at < firstEnd; at += 50 * time.Millisecond {
				g.through(at)
				if v := g.decide("r", "k", 1); !v.Allowed {
					t.Fatalf("refused at %v: %+v", at, v)
				}
				spent++
			}
			g.through(firstEnd + time.Millisecond)
		}, want: func(g *rig) error {
			// The spends since came out of the first lease's tokens, which
			// held what came back; the rest of them died at its end.
			if got := k().Tokens(); got != refill || k().spans.k != 1 || spent == 0 {
				return fmt.Errorf("%d tokens after the first lease's end (spans %v), want the refill's %d (%d spent since, from the first)", got, k().spans.n[:k().spans.k], refill, spent)
			}
			return nil
		}},
	})
}
