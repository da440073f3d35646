package lease

import (
	"fmt"
	"testing"
	"time"
)

// A settled cost beyond what the key holds is its debt: the key refuses,
// saying when refill repays it, until the debt is paid; what its next
// tokens do not pay goes with its next request, and the answer leaves the
// key owing nothing.
func TestSettledDebtTravelsWithTheNextRequest(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	var v Verdict
	g.run([]step{
		{name: "t0: first lease", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		{name: "t1: granted", at: time.Millisecond, do: func(g *rig) { g.answer() }},
		{name: "t2: admitted on an estimate of 1, its work cost 31 more than the lease holds", at: 2 * time.Millisecond,
			do: func(g *rig) {
				if v = g.decide("r", "k", 1); !v.Allowed {
					t.Fatalf("admit: %+v", v)
				}
				held := k().Tokens()
				if dropped, gone := k().Charge(v, held+30, g.now()); dropped != 0 || gone {
					t.Fatalf("Charge(%d) dropped %d, gone %v", held+30, dropped, gone)
				}
				v = g.decide("r", "k", 1)
			},
			want: func(g *rig) error {
				if k().Tokens() != 0 || k().Debt() != 30 {
					return fmt.Errorf("tokens %d, debt %d, want 0 and 30", k().Tokens(), k().Debt())
				}
				if v.Allowed || v.RetryAfter < 31*time.Millisecond {
					return fmt.Errorf("a key 30 in debt at 1000/s: %+v, want refused for 31 ms at least", v)
				}
				return nil
			}},
		{name: "t3: the debt leaves with the next request", at: 3 * time.Millisecond,
			do: func(g *rig) {
				if err := untilOut(g, time.Millisecond, 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			},
			want: func(g *rig) error {
				r, err := g.last("k")
				if err != nil {
					return err
				}
				if r.Settled != 30 || k().Debt() != 0 {
					return fmt.Errorf("request %+v, debt %d: want settled 30, nothing left owed", r, k().Debt())
				}
				return nil
			}},
		{name: "t4: answered: the store took it", at: 110 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				// n2 finds the bucket short by what n1 was lent and the debt.
				got := g.acquireAs("n2", "r", "k", 1000, 0)
				if got.Granted > 1000-30-1 {
					return fmt.Errorf("n2 granted %d of a bucket that owes 30", got.Granted)
				}
				return nil
			}},
	})
}

// A debt is paid from the next tokens the key gets, before it admits
// anything, and never past the rule's max debt (the rest is dropped and
// said).
func TestSettledDebtIsPaidFirstAndBounded(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("small", "k") } // burst 5: a debt of 5 at most
	g.decide("small", "k", 1)
	g.to(time.Millisecond)
	g.answer()
	v := g.decide("small", "k", 1)
	if !v.Allowed {
		t.Fatalf("admit: %+v", v)
	}
	held := k().Tokens()
	dropped, _ := k().Charge(v, held+8, g.now())
	if dropped != 3 || k().Debt() != 5 {
		t.Fatalf("Charge(%d) past a max debt of 5: dropped %d, debt %d; want 3 and 5", held+8, dropped, k().Debt())
	}
	// The tokens that come in pay the debt first.
	k().add(2)
	if k().Tokens() != 0 || k().Debt() != 3 {
		t.Fatalf("2 tokens in: tokens %d, debt %d; want 0 and 3", k().Tokens(), k().Debt())
	}
	k().add(4)
	if k().Tokens() != 1 || k().Debt() != 0 {
		t.Fatalf("4 more in: tokens %d, debt %d; want 1 and 0", k().Tokens(), k().Debt())
	}
	// A refusal or nothing more charges nothing.
	if d, _ := k().Charge(Verdict{}, 10, g.now()); d != 0 || k().Debt() != 0 {
		t.Fatalf("Charge of a refusal: dropped %d, debt %d", d, k().Debt())
	}
}

// A request that carried a debt and was refused before the store saw it
// gives the debt back to the key, for the next.
func TestSettledDebtKeptWhenTheRequestIsRejected(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("r", "k") }
	g.decide("r", "k", 1)
	g.to(time.Millisecond)
	g.answer()
	v := g.decide("r", "k", 1)
	k().Charge(v, k().Tokens()+12, g.now())
	if err := untilOut(g, time.Millisecond, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r, _ := g.last("k"); r.Settled != 12 {
		t.Fatalf("request %+v, want settled 12", r)
	}
	g.reject(0)
	if k().Debt() != 12 {
		t.Fatalf("debt %d after the rejection, want 12 back", k().Debt())
	}
}

// On the fallback, a settled cost takes the allowance below empty, by its
// part of the debt at most, and the allowance refuses until refill repays
// it; what it counted is reported as the allowance's consumption.
func TestSettledOnTheFallback(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	g.nodes = 2
	g.decide("r", "fresh", 1) // the first call fails: the key never held a lease
	g.to(time.Millisecond)
	g.fail()
	v := g.decide("r", "fresh", 1)
	if !v.Allowed || !v.Fallback {
		t.Fatalf("fallback admit: %+v", v)
	}
	// Its allowance holds 499 of 500 (burst/N): 499 + 200 settled past it.
	dropped, _ := g.key("r", "fresh").Charge(v, 699, g.now())
	if dropped != 0 {
		t.Fatalf("dropped %d of a cost within the allowance's part of the debt (500)", dropped)
	}
	v = g.decide("r", "fresh", 1)
	if v.Allowed || v.RetryAfter < 400*time.Millisecond {
		t.Fatalf("an allowance 200 below empty at 500/s: %+v, want refused for about 402 ms", v)
	}
	if n, _ := g.key("r", "fresh").fallback.Load().TakeConsumed(g.now()); n != 700 {
		t.Fatalf("the allowance counts %d admitted, want 700 (1 and 699 settled)", n)
	}
}

// A window key's tokens past their window were counted there: a cost
// settled after it is not paid with them, and a window rule, which owes
// nothing unless its file says so, counts none of it.
func TestSettledPastTheWindowIsNotPaidWithItsTokens(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("win", "k") }
	g.decide("win", "k", 1)
	g.to(time.Millisecond)
	g.answer()
	v := g.decide("win", "k", 1)
	if !v.Allowed || k().win.spendBy.Load() == 0 {
		t.Fatalf("admit: %+v, spendBy %d", v, k().win.spendBy.Load())
	}
	held := k().Tokens()
	if held < 1 {
		t.Fatalf("the lease holds %d", held)
	}
	late := time.Duration(k().win.spendBy.Load()) + time.Millisecond
	if dropped, _ := k().Charge(v, 1, late); dropped != 1 || k().Tokens() != held {
		t.Fatalf("settled after the window: dropped %d, tokens %d (were %d); want 1 dropped, none taken", dropped, k().Tokens(), held)
	}
	if dropped, _ := k().Charge(v, 1, g.now()); dropped != 0 || k().Tokens() != held-1 {
		t.Fatalf("settled in the window: dropped %d, tokens %d; want the lease to pay", dropped, k().Tokens())
	}
}
