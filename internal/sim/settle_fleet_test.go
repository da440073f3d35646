package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSettledCostsInTheWorld: the fleet test of settled costs
// (internal/fleet's TestSettledCosts) in the world: eight cold nodes, a
// rule of 1000 tokens a second, requests admitted on an estimate of 1 and
// settled 10-200 ms later at 1-50; the oracle holds what was admitted and
// settled to burst + rate·(T + ttl) + max_debt over every window, and the
// settled tokens are reported against the ideal, burst + rate·length.
func TestSettledCostsInTheWorld(t *testing.T) {
	if !settleInSeeds {
		t.Skip("the oracle counts what the nodes counted of a debt, not what the store's floor kept of it (scenario_settle.go): bucket and bucket-1s break by ~0.5% at 200 ms")
	}
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond} {
		t.Run(fmt.Sprint(rtt), func(t *testing.T) {
			t.Parallel()
			const length = 20 * time.Second
			sc := fleetScenario(t, fleetBucket(1000, 1000, rtt), rtt, 2, length)
			for _, st := range sc.Load.streams {
				st.cost = 1
				st.settle = &settleDraw{holdMin: 10 * time.Millisecond, holdMax: 200 * time.Millisecond, lo: 1, hi: 50,
					rng: rand.New(rand.NewPCG(uint64(st.node), 20))}
			}
			sc.Settles = true
			res := RunScenario(1, sc)
			settled := float64(res.Report.Admitted) + float64(res.Report.Checked.SettledTokens)
			ideal := 1000 + 1000*length.Seconds()
			t.Logf("settled %.0f (admitted %d + %d more in %d settlements; %d uncounted) of ideal %.0f = %.3f",
				settled, res.Report.Admitted, res.Report.Checked.SettledTokens, res.Report.Checked.Settled,
				res.Stats.SettledDropped, ideal, settled/ideal)
			if len(res.Violations) > 0 {
				t.Errorf("%s", res)
			}
			if res.Report.Checked.Settled == 0 {
				t.Error("nothing settled")
			}
		})
	}
}
