package lease

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// How requests share calls: the batch window, the pacing of calls, their
// size and how many are out at once. The keys are of rule r (1000/s, a
// first lease of 100, watermark 50) and hold no share (TokensOnly), so
// that a key asks again exactly when a Take leaves it under 50.

// calls checks the keys of the calls out, call by call.
func calls(g *rig, want ...[]string) error {
	got := g.callKeys()
	if !slices.EqualFunc(got, want, func(a, b []string) bool { return slices.Equal(a, b) }) {
		return fmt.Errorf("calls out %v, want %v", got, want)
	}
	return nil
}

// runLow spends key's leased tokens down to one under its watermark (or
// one, if it is under already) now, and turns, as a caller does: the key
// asks for a refill.
func runLow(g *rig, rule, key string) error {
	k := g.key(rule, key)
	n := max(k.Tokens()-k.low.Load()+1, 1)
	if _, ok := k.Take(n); !ok {
		return fmt.Errorf("%s: %d tokens not taken (held %d)", key, n, k.Tokens())
	}
	g.turn()
	return nil
}

// Requests of several keys due within the batch window share one call;
// new keys made in one turn share their first.
func TestRequestsWithinTheBatchWindowShareACall(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	g.run([]step{
		{name: "t0: three new keys in one turn: one call", at: 0,
			do: func(g *rig) {
				for _, k := range []string{"a", "b", "c"} {
					g.table("r").Key(k)
				}
				g.turn()
			},
			want: func(g *rig) error { return calls(g, []string{"a", "b", "c"}) }},
		{name: "t1: answered", at: time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error { return calls(g) }},
		{name: "t2: a runs low: its refill waits the batch window", at: 10 * time.Millisecond,
			want: func(g *rig) error {
				if err := runLow(g, "r", "a"); err != nil {
					return err
				}
				return calls(g)
			}},
		{name: "t3: b runs low within the window", at: 10*time.Millisecond + 500*time.Microsecond,
			want: func(g *rig) error {
				if err := runLow(g, "r", "b"); err != nil {
					return err
				}
				return calls(g)
			}},
		{name: "t4: a's window ends: a and b leave in one call", at: 11 * time.Millisecond,
			want: func(g *rig) error { return calls(g, []string{"a", "b"}) }},
		{name: "t5: c runs low after the call left: the next call is its own", at: 11*time.Millisecond + 500*time.Microsecond,
			want: func(g *rig) error {
				if err := runLow(g, "r", "c"); err != nil {
					return err
				}
				g.to(12*time.Millisecond + 500*time.Microsecond)
				return calls(g, []string{"a", "b"}, []string{"c"})
			}},
	})
}

// Calls are at least CallGap apart, but for a key's first request, which
// leaves at once (its callers wait on it), and a full call.
func TestCallsArePacedByCallGap(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true; c.CallGap = 5 * time.Millisecond; c.MaxBatch = 2 })
	g.run([]step{
		{name: "t0: a's first request leaves at once", at: 0,
			do:   func(g *rig) { g.table("r").Key("a"); g.turn() },
			want: func(g *rig) error { return calls(g, []string{"a"}) }},
		{name: "t0: and so does b's, unpaced", at: 0,
			do:   func(g *rig) { g.table("r").Key("b"); g.turn() },
			want: func(g *rig) error { return calls(g, []string{"a"}, []string{"b"}) }},
		{name: "t1: answered", at: time.Millisecond, do: func(g *rig) { g.answer() }},
		{name: "t2: a runs low", at: 2 * time.Millisecond,
			want: func(g *rig) error { return runLow(g, "r", "a") }},
		{name: "t3: its batch window is over, but the last call left 3 ms ago", at: 3 * time.Millisecond,
			want: func(g *rig) error { return calls(g) }},
		{name: "t4: 5 ms after the last call", at: 5 * time.Millisecond,
			want: func(g *rig) error {
				if at, ok := g.core.NextWake(); ok && at-g.start < 5*time.Millisecond {
					return fmt.Errorf("next wake at %v", at-g.start)
				}
				return calls(g, []string{"a"})
			}},
		{name: "t5: answered; c new, and b runs low", at: 6 * time.Millisecond,
			do: func(g *rig) {
				g.answer()
				g.table("r").Key("c")
				g.turn()
			},
			want: func(g *rig) error {
				if err := calls(g, []string{"c"}); err != nil {
					return fmt.Errorf("c's first request, 1 ms after a call: %v", err)
				}
				return runLow(g, "r", "b")
			}},
		{name: "t6: answered; a runs low too: two keys, a full call", at: 6*time.Millisecond + 500*time.Microsecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if err := runLow(g, "r", "a"); err != nil {
					return err
				}
				return calls(g)
			}},
		{name: "t7: the batch window ends: the full call leaves within the gap", at: 7 * time.Millisecond,
			want: func(g *rig) error { return calls(g, []string{"b", "a"}) }},
	})
}

// A call carries at most MaxBatch keys: more ready at once make more calls.
func TestMaxBatchSplitsCalls(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true; c.MaxBatch = 2 })
	g.run([]step{
		{name: "t0: five new keys in one turn", at: 0,
			do: func(g *rig) {
				for _, k := range []string{"a", "b", "c", "d", "e"} {
					g.table("r").Key(k)
				}
				g.turn()
			},
			want: func(g *rig) error { return calls(g, []string{"a", "b"}, []string{"c", "d"}, []string{"e"}) }},
		{name: "t1: all answered", at: time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				for _, k := range []string{"a", "b", "c", "d", "e"} {
					if n := g.key("r", k).Tokens(); n != 100 {
						return fmt.Errorf("%s holds %d, want its lease of 100", k, n)
					}
				}
				return nil
			}},
	})
}

// At most MaxInFlight calls are out: the keys that ask meanwhile wait for
// an answer to free a call, and no deadline of theirs wakes the Core.
func TestMaxInFlightHoldsCallsUntilAnAnswer(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true; c.MaxInFlight = 2; c.MaxBatch = 2 })
	g.run([]step{
		{name: "t0: five new keys: two calls of two, e waits", at: 0,
			do: func(g *rig) {
				for _, k := range []string{"a", "b", "c", "d", "e"} {
					g.table("r").Key(k)
				}
				g.turn()
			},
			want: func(g *rig) error {
				if err := calls(g, []string{"a", "b"}, []string{"c", "d"}); err != nil {
					return err
				}
				if at, ok := g.core.NextWake(); ok && at <= g.now() {
					return fmt.Errorf("the Core wants to wake now with its calls all out")
				}
				return nil
			}},
		{name: "t1: still two out", at: 50 * time.Millisecond,
			want: func(g *rig) error { return calls(g, []string{"a", "b"}, []string{"c", "d"}) }},
		{name: "t2: one answered: e's call leaves at once", at: 60 * time.Millisecond,
			do: func(g *rig) { g.answerCall(0) },
			want: func(g *rig) error {
				if err := calls(g, []string{"c", "d"}, []string{"e"}); err != nil {
					return err
				}
				if n := g.key("r", "a").Tokens(); n != 100 {
					return fmt.Errorf("a holds %d after its answer, want 100", n)
				}
				return nil
			}},
	})
}

// A key's first request leaves in the turn that makes it, however long the
// batch window and the gap between calls: its callers wait on it. A refill
// of a key already served waits for both, or rides along with a first
// request that leaves before.
func TestFirstRequestLeavesAtOnce(t *testing.T) {
	g := newRig(t, func(c *Config) {
		c.TokensOnly = true
		c.BatchWindow = 50 * time.Millisecond
		c.CallGap = 200 * time.Millisecond
	})
	var v Verdict
	g.run([]step{
		{name: "t0: a new key's first decision waits, and its request is out", at: 0,
			do: func(g *rig) { v = g.decide("r", "a", 1) },
			want: func(g *rig) error {
				if err := verdict(v, false, false, true); err != nil {
					return err
				}
				return calls(g, []string{"a"})
			}},
		{name: "t1: answered; a runs low", at: time.Millisecond,
			do:   func(g *rig) { g.answer() },
			want: func(g *rig) error { return runLow(g, "r", "a") }},
		{name: "t2: a's batch window is over, the gap after t0's call is not", at: 51 * time.Millisecond,
			want: func(g *rig) error { return calls(g) }},
		{name: "t3: the gap is over: a's refill leaves", at: 200 * time.Millisecond,
			want: func(g *rig) error { return calls(g, []string{"a"}) }},
		{name: "t4: answered; b new, 1 ms after a call: its request leaves at once", at: 201 * time.Millisecond,
			do: func(g *rig) {
				g.answer()
				v = g.decide("r", "b", 1)
			},
			want: func(g *rig) error {
				if err := verdict(v, false, false, true); err != nil {
					return err
				}
				return calls(g, []string{"b"})
			}},
		{name: "t5: answered; a runs low, then c is new: a's refill rides with c's first request", at: 202 * time.Millisecond,
			do: func(g *rig) {
				g.answer()
				if err := runLow(g, "r", "a"); err != nil {
					t.Fatal(err)
				}
				g.decide("r", "c", 1)
			},
			want: func(g *rig) error { return calls(g, []string{"a", "c"}) }},
	})
}

// A key has one request out at a time: decisions while it is on its way ask
// for nothing more, and the key asks again only after its answer.
func TestOneRequestInFlightPerKey(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var v Verdict
	g.run([]step{
		{name: "t0: a's first request", at: 0, do: func(g *rig) { g.decide("r", "a", 1) },
			want: func(g *rig) error { return calls(g, []string{"a"}) }},
		{name: "t1: more decisions wait on it and send nothing", at: time.Millisecond,
			do: func(g *rig) {
				for range 5 {
					v = g.key("r", "a").Decide(1, g.now(), g.clk.Now(), 1, AfterWait)
					g.turn()
				}
			},
			want: func(g *rig) error {
				if err := verdict(v, false, false, true); err != nil {
					return err
				}
				return calls(g, []string{"a"})
			}},
		{name: "t2: answered", at: 2 * time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error { return calls(g) }},
		{name: "t3: a runs low: its refill leaves after the batch window", at: 3 * time.Millisecond,
			want: func(g *rig) error {
				if err := runLow(g, "r", "a"); err != nil {
					return err
				}
				if err := calls(g); err != nil {
					return err
				}
				g.to(4 * time.Millisecond)
				return calls(g, []string{"a"})
			}},
		{name: "t4: spent and refused while the refill is out: nothing more leaves", at: 5 * time.Millisecond,
			do: func(g *rig) {
				g.decide("r", "a", g.key("r", "a").Tokens())
				v = g.decide("r", "a", 1)
				g.to(10 * time.Millisecond)
			},
			want: func(g *rig) error {
				if err := verdict(v, false, false, false); err != nil {
					return err
				}
				if n := len(g.requests("a")); n != 2 {
					return fmt.Errorf("%d requests of a sent, want 2", n)
				}
				return calls(g, []string{"a"})
			}},
		{name: "t5: answered: a holds its refill", at: 11 * time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if g.key("r", "a").Tokens() == 0 {
					return fmt.Errorf("a holds nothing after its refill")
				}
				return nil
			}},
	})
}
