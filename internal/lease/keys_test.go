package lease

import (
	"fmt"
	"testing"
	"time"
)

// The keys a node holds: the cap on them, and the rules that go.

// At MaxKeys a new key gets no lease (Table.Key says nil) and is counted
// (OverCap); the keys held are still found, and once idle keys leave a new
// one gets in.
func TestMaxKeysRefusesANewKey(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true; c.MaxKeys = 2 })
	g.run([]step{
		{name: "t0: a and b are made; c is one too many", at: 0,
			do: func(g *rig) {
				g.table("r").Key("a")
				g.table("api").Key("b")
				g.turn()
			},
			want: func(g *rig) error {
				if k := g.table("r").Key("c"); k != nil {
					return fmt.Errorf("a third key got a lease at MaxKeys 2")
				}
				if g.core.OverCap() != 1 || g.core.Keys() != 2 {
					return fmt.Errorf("over cap %d, keys %d, want 1 and 2", g.core.OverCap(), g.core.Keys())
				}
				return calls(g, []string{"a", "b"})
			}},
		{name: "t1: answered; the keys held are still found, and not counted", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if g.table("r").Key("a") == nil || g.table("api").Key("b") == nil {
					return fmt.Errorf("a held key not found")
				}
				if g.core.OverCap() != 1 {
					return fmt.Errorf("over cap %d, want 1", g.core.OverCap())
				}
				return nil
			}},
		{name: "t2: a, never used, leaves after half its TTL: room for c", at: 600 * time.Millisecond,
			want: func(g *rig) error {
				if g.core.Keys() != 1 || g.table("r").Lookup("a") != nil {
					return fmt.Errorf("keys %d, a still in its table: %v", g.core.Keys(), g.table("r").Lookup("a") != nil)
				}
				if k := g.table("r").Key("c"); k == nil {
					return fmt.Errorf("c refused with one key held")
				}
				g.turn()
				if g.core.OverCap() != 1 || g.core.Keys() != 2 {
					return fmt.Errorf("over cap %d, keys %d, want 1 and 2", g.core.OverCap(), g.core.Keys())
				}
				return calls(g, []string{"c"})
			}},
	})
}

// Forget takes the keys of a rule that went out at the next turn: their
// Takes fail (look again), nothing of them is reported or returned, and a
// key whose request is out leaves once it is answered; the table goes with
// its last key, and the rule, back, starts afresh. Other rules' keys stay.
func TestForgetTakesARulesKeysOut(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var a *KeyLease
	var v Verdict
	g.run([]step{
		{name: "t0: a of r and x of api", at: 0,
			do: func(g *rig) { g.decide("r", "a", 1); g.decide("api", "x", 1) }},
		{name: "t1: answered", at: time.Millisecond, do: func(g *rig) { g.answer(); a = g.key("r", "a") }},
		{name: "t2: b of r asks for its first lease", at: 2 * time.Millisecond,
			do:   func(g *rig) { g.decide("r", "b", 1) },
			want: func(g *rig) error { return calls(g, []string{"b"}) }},
		{name: "t3: r is forgotten: a leaves at the next turn, b waits for its answer", at: 3 * time.Millisecond,
			do: func(g *rig) {
				g.core.Forget("r")
				g.turn()
				v = a.Decide(1, g.now(), g.clk.Now(), 1, FirstAttempt)
			},
			want: func(g *rig) error {
				if !v.Gone || a.phase != phaseLeft {
					return fmt.Errorf("a's decision %+v, phase %v: want gone", v, a.phase)
				}
				if g.core.Keys() != 2 {
					return fmt.Errorf("keys %d, want b and x", g.core.Keys())
				}
				return nil
			}},
		{name: "t4: b answered: it leaves, and the table with it", at: 4 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if g.core.Keys() != 1 {
					return fmt.Errorf("keys %d, want x alone", g.core.Keys())
				}
				for _, tb := range g.core.tableList() {
					if tb.Name() == "r" {
						return fmt.Errorf("r's table is still there, %d keys", tb.Len())
					}
				}
				return nil
			}},
		{name: "t5: nothing of r was returned, and x is served still", at: 200 * time.Millisecond,
			want: func(g *rig) error {
				for _, ret := range g.rets {
					if ret.Rule == "r" {
						return fmt.Errorf("returned %+v of a rule that went", ret)
					}
				}
				if v := g.decide("api", "x", 1); !v.Allowed || v.Fallback {
					return fmt.Errorf("x: %+v", v)
				}
				return nil
			}},
		{name: "t6: r back: a fresh table, a new key asks afresh", at: 300 * time.Millisecond,
			do: func(g *rig) { g.answer(); v = g.decide("r", "a", 1) },
			want: func(g *rig) error {
				if g.table("r").Lookup("a") == a {
					return fmt.Errorf("the old lease of a is back")
				}
				if err := verdict(v, false, false, true); err != nil {
					return err
				}
				return calls(g, []string{"a"})
			}},
	})
}

// A key made on the table of a rule already forgotten (a caller that
// looked the table up before Forget) is taken out too: it is not counted
// against MaxKeys for ever, and its decisions say Gone rather than Wait.
func TestKeyMadeOnAForgottenTableLeaves(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var old *Table
	var z *KeyLease
	var v Verdict
	g.run([]step{
		{name: "t0: a caller holds r's table", at: 0, do: func(g *rig) { old = g.table("r") }},
		{name: "t1: r is forgotten", at: time.Millisecond,
			do: func(g *rig) { g.core.Forget("r"); g.turn() }},
		{name: "t2: the caller makes z on the old table", at: 2 * time.Millisecond,
			do: func(g *rig) {
				z = old.Key("z")
				g.turn()
			}},
		{name: "t3: z is gone, and not counted", at: 10 * time.Millisecond,
			do: func(g *rig) { v = z.Decide(1, g.now(), g.clk.Now(), 1, FirstAttempt); g.turn() },
			want: func(g *rig) error {
				if !v.Gone || g.core.Keys() != 0 {
					return fmt.Errorf("z's decision %+v, %d keys counted", v, g.core.Keys())
				}
				return nil
			}},
	})
}
