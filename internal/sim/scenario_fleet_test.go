package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// fleetScenario is the real-process fleet tests' setting in the world
// (internal/fleet): eight cold nodes (the allocators and an id only), one
// key at a multiple of one rule, a round trip, Poisson arrivals.
func fleetScenario(t *testing.T, yaml string, rtt time.Duration, mult float64, length time.Duration) *Scenario {
	return fleetWorld(t, yaml, rtt, mult, length, false)
}

// fleetWorld is fleetScenario with arrivals paced (the fleet tests') or
// Poisson.
func fleetWorld(t *testing.T, yaml string, rtt time.Duration, mult float64, length time.Duration, paced bool) *Scenario {
	set, err := rules.Parse("sim", []byte("rules:\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{Nodes: 8, Rules: set, Link: Link{OneWay: rtt / 2}, Length: length}
	sc.label("fleet", " rtt=%v x%g paced=%v", rtt, mult, paced)
	if rtt >= time.Second {
		sc.label("far", "")
	}
	for _, r := range set.Rules() {
		for i := range sc.Nodes {
			s := sc.Load.add(sc, r, i, "k", mult*r.Rate()/8, 0, length)
			s.paced = paced
			// The fleet tests ask one token at a time; the world groups
			// tokens into costs, but no larger than what a node's share
			// pools (a tenth of a second of it), which a cost above it
			// could never be paid from.
			if pool := int64(max(r.Rate()/8*0.1, 1)); s.cost > pool {
				s.rate, s.cost = s.rate*float64(s.cost)/float64(pool), pool
			}
		}
	}
	return sc
}

// The token buckets of the fleet tests' distance matrix, with the TTL a
// node suggests (four round trips) where the rule's 2 s is two or fewer.
func fleetBucket(limit, burst int64, rtt time.Duration) string {
	ttl := max(2*time.Second, 4*rtt)
	return fmt.Sprintf("  - {name: r, algorithm: token_bucket, limit: %d, period: 1s, burst: %d, lease: {ttl: %v}}\n", limit, burst, ttl)
}

// TestFleetScenarios plays the fleet tests' distance matrix for token
// buckets in the world: every bound holds, and a paced load (the fleet
// tests') reaches the accuracy target. Poisson arrivals are reported
// beside it: a small rule's share of a token or two a node loses what the
// gaps between arrivals let its capped pool overflow (docs/bounds.md).
func TestFleetScenarios(t *testing.T) {
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, time.Second} {
		for _, rule := range []struct {
			name         string
			limit, burst int64
		}{{"1000/s b100", 1000, 100}, {"20/s b5", 20, 5}, {"20000/s b20000", 20000, 20000}} {
			for _, mult := range []float64{2, 50} {
				t.Run(fmt.Sprintf("%v/%s/x%g", rtt, rule.name, mult), func(t *testing.T) {
					t.Parallel()
					length := 30 * time.Second
					if rule.limit < 100 {
						length = 60 * time.Second
					}
					yaml := fleetBucket(rule.limit, rule.burst, rtt)
					paced := RunScenario(1, fleetWorld(t, yaml, rtt, mult, length, true))
					poisson := RunScenario(1, fleetWorld(t, yaml, rtt, mult, length, false))
					t.Logf("paced %.3f, Poisson %.3f (target %.2f)", paced.Report.Ratio, poisson.Report.Ratio, paced.accuracyTarget())
					for _, res := range []Result{paced, poisson} {
						if len(res.Violations) > 0 {
							t.Errorf("%s", res)
						}
					}
					if paced.accuracyMissed() {
						t.Errorf("%s", paced)
					}
				})
			}
		}
	}
}
