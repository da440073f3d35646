package lease

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Close empties the node into what it owes the allocator: the requests
// that failed and may have been applied, sent again with their sequence
// numbers; the reports of what keys admitted on their fallback; and every
// key's return, saying what it holds (Held), tokens or not.
func TestCloseReportsRetriesAndReturns(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var lost Request
	var held map[string]int64
	var fin Final
	var a *KeyLease
	g.run([]step{
		{name: "t0: a and b of r, c of api: one call", at: 0,
			do: func(g *rig) {
				g.table("r").Key("a")
				g.table("r").Key("b")
				g.table("api").Key("c")
				g.turn()
			}},
		{name: "t1: answered", at: time.Millisecond, do: func(g *rig) { g.answer() }},
		{name: "t2: a spends 10; b runs low, its refill leaves", at: 2 * time.Millisecond,
			do: func(g *rig) {
				g.decide("r", "a", 10)
				if err := runLow(g, "r", "b"); err != nil {
					t.Fatal(err)
				}
				g.to(3 * time.Millisecond)
				lost, _ = g.last("b")
			},
			want: func(g *rig) error { return calls(g, []string{"b"}) }},
		{name: "t3: the store applies b's refill, its answer is lost: down", at: 4 * time.Millisecond,
			do: func(g *rig) { g.lose() }},
		{name: "t4: a new key d admits 3 on its fallback; its report waits for the backoff", at: 10 * time.Millisecond,
			do: func(g *rig) {
				if v := g.decide("r", "d", 3); !v.Allowed || !v.Fallback {
					t.Fatalf("d: %+v", v)
				}
			},
			want: func(g *rig) error { return calls(g) }},
		{name: "t5: closed", at: 20 * time.Millisecond,
			do: func(g *rig) {
				a = g.key("r", "a")
				held = map[string]int64{"a": a.Tokens(), "b": g.key("r", "b").Tokens(), "c": g.key("api", "c").Tokens()}
				fin = g.core.Close(g.now())
			},
			want: func(g *rig) error {
				if len(fin.Retries) != 1 || fin.Retries[0].Key != "b" || fin.Retries[0].Seq != lost.Seq {
					return fmt.Errorf("retries %+v, want b's lost request, seq %d", fin.Retries, lost.Seq)
				}
				if len(fin.Reports) != 1 || fin.Reports[0].Key != "d" || fin.Reports[0].Consumed != 3 ||
					fin.Reports[0].ConsumedAge != 10*time.Millisecond {
					return fmt.Errorf("reports %+v, want d's 3, 10 ms old", fin.Reports)
				}
				if held["a"] != 90 {
					return fmt.Errorf("a held %d, want 90", held["a"])
				}
				got := map[string]Return{}
				for _, ret := range fin.Returns {
					got[ret.Key] = ret
				}
				if len(got) != 3 {
					return fmt.Errorf("returns %+v, want a, b and c (d never asked)", fin.Returns)
				}
				for key, n := range held {
					if ret := got[key]; ret.Tokens != n || ret.Held != n {
						return fmt.Errorf("%s returns %+v, want %d tokens and held %d", key, ret, n, n)
					}
				}
				if g.core.Keys() != 0 {
					return fmt.Errorf("%d keys left after Close", g.core.Keys())
				}
				if left, _ := a.Take(1); left >= 0 {
					return fmt.Errorf("a still takes, %d left", left)
				}
				return nil
			}},
		{name: "t6: the allocator takes it all", at: 20 * time.Millisecond,
			want: func(g *rig) error {
				ctx := context.Background()
				for _, reqs := range [][]Request{fin.Retries, fin.Reports} {
					if _, err := g.srv.Acquire(ctx, AcquireProto(g.node, reqs)); err != nil {
						return err
					}
				}
				_, err := g.srv.Release(ctx, ReleaseProto(g.node, fin.Returns))
				return err
			}},
	})
}

// A request Close sends again may never have reached the store: applied
// afresh then, it must say what the key holds, or the store believes the
// key holds nothing and the Release that follows it (Manager.Close sends
// retries first) credits none of the key's tokens.
func TestCloseRetriesSayWhatTheKeyHolds(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("api", "a") }
	var fin Final
	var held, before int64
	g.run([]step{
		{name: "t0: a's first request, for 50", at: 0, do: func(g *rig) { g.decide("api", "a", 50) }},
		{name: "t1: answered", at: time.Millisecond, do: func(g *rig) { g.answer() }},
		{name: "t2: a runs low; its refill is answered", at: 100 * time.Millisecond,
			do: func(g *rig) {
				if err := runLow(g, "api", "a"); err != nil {
					t.Fatal(err)
				}
				g.to(101 * time.Millisecond)
				g.to(102 * time.Millisecond)
				g.answer()
			}},
		{name: "t3: a runs low again: its refill leaves, and fails before the store sees it", at: 200 * time.Millisecond,
			do: func(g *rig) {
				if err := runLow(g, "api", "a"); err != nil {
					t.Fatal(err)
				}
				g.to(201 * time.Millisecond)
				g.fail()
				held = k().Tokens()
			}},
		{name: "t4: closed: the retry goes first, then the return", at: 210 * time.Millisecond,
			do: func(g *rig) {
				fin = g.core.Close(g.now())
				ctx := context.Background()
				if _, err := g.srv.Acquire(ctx, AcquireProto(g.node, fin.Retries)); err != nil {
					t.Fatal(err)
				}
				before = g.acquireAs("n2", "api", "a", 0, 0).Remaining
				if _, err := g.srv.Release(ctx, ReleaseProto(g.node, fin.Returns)); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				if len(fin.Retries) != 1 || len(fin.Returns) != 1 || fin.Returns[0].Tokens != held || held < 10 {
					return fmt.Errorf("final %+v, want a's retry and its return of %d", fin, held)
				}
				if got := g.acquireAs("n2", "api", "a", 0, 0).Remaining; got < before+held {
					return fmt.Errorf("the bucket holds %d after the return, want %d + the %d returned", got, before, held)
				}
				return nil
			}},
	})
}
