package lease

import (
	"fmt"
	"testing"
	"time"
)

// What a key's fallback allowance admitted after its request left is in
// no report: the grant that answers the request pays for it out of its
// tokens, and what the grant cannot pay is owed to the key's next report,
// dated from the first of it. (Rule api: 1000/min, burst 200; n2 leaves 3
// tokens in the bucket, and k's report of 2 takes two of them.)
func TestFallbackAdmittedInFlightIsPaidFromTheGrantAndTheRestOwed(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("api", "k") }
	var v Verdict
	var inFlightAt time.Duration
	g.run([]step{
		{name: "t0: another key's call fails: down", at: 0,
			do: func(g *rig) { g.decide("api", "o", 1); g.fail() }},
		{name: "t1: k, new, admits 2 on its full allowance", at: time.Millisecond,
			do:   func(g *rig) { v = g.decide("api", "k", 2) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t2: after the backoff its request leaves, reporting the 2", at: 2 * time.Millisecond,
			do: func(g *rig) {
				if err := untilOut(g, time.Millisecond, 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				if r, err := g.last("k"); err != nil || r.Consumed != 2 {
					return fmt.Errorf("request %+v (%v), want 2 consumed", r, err)
				}
				return nil
			}},
		{name: "t3: 10 more admitted while it is out", at: 100 * time.Millisecond,
			do: func(g *rig) {
				v = g.decide("api", "k", 10)
				inFlightAt = g.now() - g.start
			},
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t4: n2 leaves 3; k's answer grants the 1 left after its report", at: 110 * time.Millisecond,
			do: func(g *rig) {
				if got := g.acquireAs("n2", "api", "k", 197, 0); got.Granted != 197 {
					t.Fatalf("n2 granted %+v", got)
				}
				g.answer()
			},
			want: func(g *rig) error {
				if k().phase != phaseLeased || k().fallback.Load() != nil || !k().req.short {
					return fmt.Errorf("phase %v, allowance %v, short %v", k().phase, k().fallback.Load() != nil, k().req.short)
				}
				if k().Tokens() != 0 {
					return fmt.Errorf("holds %d: the grant's 1 should have paid for one of the 10", k().Tokens())
				}
				if k().req.owed != 9 || k().req.owedSince.sinceOrigin()-g.start != inFlightAt {
					return fmt.Errorf("owes %d since %v, want 9 since %v", k().req.owed, k().req.owedSince.sinceOrigin()-g.start, inFlightAt)
				}
				return nil
			}},
		{name: "t5: served again, a refusal, not the allowance", at: 120 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("api", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, false) }},
		{name: "t6: its next request reports the 9, dated from t3", at: 121 * time.Millisecond,
			do: func(g *rig) {
				g.answer() // (whatever else is out)
				if err := untilOut(g, time.Millisecond, 2*time.Second); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				r, err := g.last("k")
				if want := g.now() - g.start - inFlightAt; err != nil || r.Consumed != 9 || r.ConsumedAge != want {
					return fmt.Errorf("request %+v (%v), want 9 consumed, %v old", r, err, want)
				}
				return nil
			}},
	})
}
