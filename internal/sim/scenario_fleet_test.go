package sim

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// fleetScenario is the real-process fleet tests' setting in the world:
// eight nodes, one key at a multiple of one rule, a round trip.
func fleetScenario(t *testing.T, yaml string, rtt time.Duration, mult float64, length time.Duration) *Scenario {
	set, err := rules.Parse("sim", []byte("rules:\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{Nodes: 8, Rules: set, Link: Link{OneWay: rtt / 2}, Length: length}
	sc.label("fleet", " rtt=%v x%g", rtt, mult)
	if rtt >= time.Second {
		sc.label("far", "")
	}
	for _, r := range set.Rules() {
		for i := range sc.Nodes {
			sc.Load.add(sc, r, i, "k", mult*r.Rate()/8, 0, length)
		}
	}
	return sc
}

func TestFleetScenarios(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		rtt  time.Duration
	}{
		{"1000/s b100 200ms", "  - {name: r, algorithm: token_bucket, limit: 1000, period: 1s, burst: 100, lease: {ttl: 2s}}\n", 200 * time.Millisecond},
		{"1000/s b100 1s", "  - {name: r, algorithm: token_bucket, limit: 1000, period: 1s, burst: 100, lease: {ttl: 4s}}\n", time.Second},
		{"20/s b5 200ms", "  - {name: r, algorithm: token_bucket, limit: 20, period: 1s, burst: 5, lease: {ttl: 2s}}\n", 200 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := RunScenario(1, fleetScenario(t, c.yaml, c.rtt, 2, 15*time.Second))
			t.Logf("%s", res)
			if res.Failed() {
				t.Fail()
			}
		})
	}
}
