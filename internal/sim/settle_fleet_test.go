package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// TestSettledCostsInTheWorld: the fleet test of settled costs
// (internal/fleet's TestSettledCosts) in the world: eight cold nodes, a
// rule of 1000 tokens a second, requests admitted on an estimate of 1 and
// settled 10-200 ms later at 1-50, with a max_debt its callers cannot owe
// more than at once; the oracle holds what was admitted and what the work
// cost above it to burst + rate·(T + ttl) + max_debt over every window,
// and the settled tokens are reported against the ideal, burst +
// rate·length.
func TestSettledCostsInTheWorld(t *testing.T) {
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond} {
		t.Run(fmt.Sprint(rtt), func(t *testing.T) {
			t.Parallel()
			sc := settledFleet(t, rtt)
			d, r := sc.Load.streams[0].settle, sc.Rules.Rules()[0]
			res := RunScenario(1, sc)
			settled := float64(res.Report.Admitted) + float64(res.Report.Checked.SettledTokens)
			ideal := 1000 + 1000*sc.Length.Seconds()
			t.Logf("settled %.0f (admitted %d + %d more in %d settlements; %d uncounted by the nodes) of ideal %.0f = %.3f; callers owed at most %d at once, max_debt %d",
				settled, res.Report.Admitted, res.Report.Checked.SettledTokens, res.Report.Checked.Settled,
				res.Stats.SettledDropped, ideal, settled/ideal, d.maxOwed, r.Debt())
			if len(res.Violations) > 0 {
				t.Errorf("%s", res)
			}
			if res.Report.Checked.Settled == 0 {
				t.Error("nothing settled")
			}
		})
	}
}

// settledFleet is TestSettledCostsInTheWorld's world for 20 s at rtt.
func settledFleet(t *testing.T, rtt time.Duration) *Scenario { return settledFleetDebt(t, rtt, 0) }

// settledFleetDebt is settledFleet with a max_debt of debt, or the drawn
// one when debt is 0.
func settledFleetDebt(t *testing.T, rtt time.Duration, debt int64) *Scenario {
	sc := fleetScenario(t, fleetBucket(1000, 1000, rtt), rtt, 2, 20*time.Second)
	d := &settleDraw{holdMin: 10 * time.Millisecond, holdMax: 200 * time.Millisecond, lo: 1, hi: 50,
		rng: rand.New(rand.NewPCG(1, 20))}
	for _, st := range sc.Load.streams {
		st.cost, st.settle = 1, d
	}
	r := sc.Rules.Rules()[0]
	if debt == 0 {
		debt = d.debt(r, false) // (no cuts)
	}
	r.MaxDebt = rules.MaxDebtOf(debt)
	sc.Settles = true
	return sc
}
