package lease

import (
	"fmt"
	"testing"
	"time"
)

// Calls the allocator refuses (a Rejection): naming one request, that key
// is set apart; as a whole, the node cannot be served and backs off.

// A refusal naming one request is no outage: the other keys ask again at
// once, in a call of their own, and the key named waits a second and asks
// alone from then on, so that it cannot have a call of others refused.
func TestCallRejectedNamingOneRequest(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var v Verdict
	g.run([]step{
		{name: "t0: three new keys, one call", at: 0,
			do: func(g *rig) {
				for _, k := range []string{"a", "b", "c"} {
					g.table("r").Key(k)
				}
				g.turn()
			},
			want: func(g *rig) error { return calls(g, []string{"a", "b", "c"}) }},
		{name: "t1: refused naming b: a and c ask again at once", at: time.Millisecond,
			do: func(g *rig) { g.reject(1) },
			want: func(g *rig) error {
				if g.core.Down() {
					return fmt.Errorf("a refusal of one request counted the allocator down")
				}
				return calls(g, []string{"a", "c"})
			}},
		{name: "t2: answered", at: 2 * time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if g.key("r", "a").Tokens() != 100 || g.key("r", "c").Tokens() != 100 {
					return fmt.Errorf("a holds %d, c %d, want 100 each", g.key("r", "a").Tokens(), g.key("r", "c").Tokens())
				}
				return nil
			}},
		{name: "t3: b's caller decides again: it waits, and no request leaves", at: 3 * time.Millisecond,
			do: func(g *rig) { v = g.decide("r", "b", 1); g.decide("r", "a", 1) },
			want: func(g *rig) error {
				if err := verdict(v, false, false, true); err != nil {
					return err
				}
				return calls(g)
			}},
		{name: "t4: a's refill goes without b", at: 400 * time.Millisecond,
			do: func(g *rig) {
				if err := runLow(g, "r", "a"); err != nil {
					t.Fatal(err)
				}
				g.to(401 * time.Millisecond)
			},
			want: func(g *rig) error { return calls(g, []string{"a"}) }},
		{name: "t5: answered; a runs low just before b's second is up", at: 1000*time.Millisecond + 500*time.Microsecond,
			do: func(g *rig) {
				g.answer() // (and a's return of its first lease's last tokens, at 991 ms)
				if err := runLow(g, "r", "a"); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error { return calls(g) }},
		{name: "t6: a second after the refusal b asks, alone", at: 1001 * time.Millisecond,
			want: func(g *rig) error { return calls(g, []string{"b"}, []string{"a"}) }},
		{name: "t7: answered: b is served, and asks with others again", at: 1002 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if b := g.key("r", "b"); b.Tokens() == 0 || b.req.solo {
					return fmt.Errorf("b holds %d, solo %v", b.Tokens(), b.req.solo)
				}
				return nil
			}},
	})
}

// A call refused as a whole cannot be served: the allocator is counted
// unreachable (the keys fall back), and the call backs off, doubling from
// a quarter second, and comes back whole.
func TestCallRejectedAsAWhole(t *testing.T) {
	var ups []bool
	g := newRig(t, func(c *Config) {
		c.TokensOnly = true
		c.Hooks.Reachable = func(up bool, _ error) { ups = append(ups, up) }
	})
	var v Verdict
	var first Request
	var refusedAt, backAt time.Duration
	g.run([]step{
		{name: "t0: two new keys, one call", at: 0,
			do: func(g *rig) {
				g.table("r").Key("a")
				g.table("r").Key("b")
				g.turn()
			},
			want: func(g *rig) error {
				first, _ = g.last("a")
				return calls(g, []string{"a", "b"})
			}},
		{name: "t1: refused as a whole: down, nothing asks at once", at: time.Millisecond,
			do: func(g *rig) { g.reject(-1); refusedAt = g.now() - g.start },
			want: func(g *rig) error {
				if !g.core.Down() || len(ups) != 1 || ups[0] {
					return fmt.Errorf("down %v, reachable hooks %v", g.core.Down(), ups)
				}
				return calls(g)
			}},
		{name: "t2: a falls back: a new key decides on its full allowance", at: 10 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "a", 1) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t3: no call within 0.8 of the quarter second", at: 200 * time.Millisecond,
			want: func(g *rig) error { return calls(g) }},
		{name: "t4: the call comes back whole within 1.2 of it", at: 201 * time.Millisecond,
			do: func(g *rig) {
				if err := untilOut(g, time.Millisecond, 301*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				backAt = g.now() - g.start
			},
			want: func(g *rig) error {
				if err := calls(g, []string{"a", "b"}); err != nil {
					return err
				}
				// (Refused, it may not have been: sent again as it was, to be
				// applied once; what a admitted since waits for its next. It
				// leaves on the fallback now, and says so.)
				if r, _ := g.last("a"); !r.OnFallback {
					return fmt.Errorf("a asks %+v, not on the fallback", r)
				} else if r.OnFallback = first.OnFallback; r != first {
					return fmt.Errorf("a asks %+v, want its first request again %+v", r, first)
				}
				return nil
			}},
		{name: "t5: refused again: the backoff doubles", at: 310 * time.Millisecond,
			do: func(g *rig) { g.reject(-1); refusedAt = g.now() - g.start },
			want: func(g *rig) error {
				if err := untilOut(g, time.Millisecond, refusedAt+600*time.Millisecond); err != nil {
					return err
				}
				if d := g.now() - g.start - refusedAt; d < 400*time.Millisecond {
					return fmt.Errorf("asked again %v after the second refusal (the first after %v), want 0.4 s to 0.6 s", d, backAt-time.Millisecond)
				}
				// Older than half a TTL, a's request is a new one, and carries
				// what a admitted.
				if r, _ := g.last("a"); r.Seq == first.Seq || r.Consumed != 1 {
					return fmt.Errorf("a asks %+v, want a new request reporting 1", r)
				}
				return calls(g, []string{"a", "b"})
			}},
		{name: "t6: answered: reachable again, both keys served", at: 950 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if g.core.Down() || len(ups) != 2 || !ups[1] {
					return fmt.Errorf("down %v, reachable hooks %v", g.core.Down(), ups)
				}
				for _, k := range []string{"a", "b"} {
					if p := g.key("r", k).phase; p != phaseLeased {
						return fmt.Errorf("%s %v, want leased", k, p)
					}
				}
				return nil
			}},
	})
}

// The backoff after a refusal as a whole holds every call, as an outage's
// does: a request made meanwhile (a new key's, on its fallback) must not
// take the refused keys' requests with it ahead of their time, to be
// refused again.
func TestWholeRefusalBackoffHoldsEveryCall(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var v Verdict
	g.run([]step{
		{name: "t0: two new keys, one call", at: 0,
			do: func(g *rig) {
				g.table("r").Key("a")
				g.table("r").Key("b")
				g.turn()
			}},
		{name: "t1: refused as a whole", at: time.Millisecond, do: func(g *rig) { g.reject(-1) }},
		{name: "t2: a new key decides on its fallback: nothing leaves within the backoff", at: 20 * time.Millisecond,
			do: func(g *rig) { v = g.decide("r", "c", 1) },
			want: func(g *rig) error {
				if err := verdict(v, true, true, false); err != nil {
					return err
				}
				return calls(g)
			}},
		{name: "t3: still nothing", at: 150 * time.Millisecond,
			want: func(g *rig) error { return calls(g) }},
	})
}
