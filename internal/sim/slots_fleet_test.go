package sim

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// slotFleet is a fleet of nodes on one concurrency rule (yaml), callers
// holding each slot 20-80 ms at mult times what the limit serves, spread
// evenly over the nodes, Poisson.
func slotFleet(t *testing.T, yaml string, nodes int, rtt time.Duration, mult float64, length time.Duration) *Scenario {
	set, err := rules.Parse("sim", []byte("rules:\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{Nodes: nodes, Rules: set, Link: Link{OneWay: rtt / 2}, Length: length, Configured: true}
	sc.label("slot-fleet", " rtt=%v x%g", rtt, mult)
	sc.Load.holdMin, sc.Load.holdMax = 20*time.Millisecond, 80*time.Millisecond
	r := set.Rules()[0]
	rate := mult * float64(r.Limit) / 0.05
	for i := range nodes {
		sc.Load.streams = append(sc.Load.streams, &stream{node: i, rule: r.Name, key: "k", rate: rate / float64(nodes), cost: 1, to: length})
	}
	return sc
}

const slots20 = "  - {name: c, algorithm: concurrency, limit: 20, lease: {ttl: 1s}}\n"

// The run: 8 nodes, 20 in flight, handlers holding each slot 20-80
// ms under 10 times the demand: never more than 20 in flight, the slots
// busy nearly all the time; a node killed holding slots gives them back
// within one TTL.
func TestSlotFleet(t *testing.T) {
	res := RunScenario(1, slotFleet(t, slots20, 8, 2*time.Millisecond, 10, 10*time.Second))
	if len(res.Violations) > 0 || len(res.Report.Slots) != 1 {
		t.Fatalf("%s", res)
	}
	use := res.Report.Slots[0].Ratio
	t.Logf("calm: slot-time used %.3f of the limit's; %+v", use, res.Stats)
	if use < 0.95 {
		t.Errorf("slot-time used %.3f of the limit's, want ≥ 0.95", use)
	}
	sc := slotFleet(t, slots20, 8, 2*time.Millisecond, 10, 10*time.Second)
	sc.Faults.add(sc, 4*time.Second, "crash", "(node 0, 3s)", func(w *World) {
		w.nodes[0].crash()
		w.oracle.Fault(w.now, w.now+3*time.Second, "node crash")
		w.after(3*time.Second, w.nodes[0].boot)
	})
	res = RunScenario(1, sc)
	if len(res.Violations) > 0 {
		t.Fatalf("%s", res)
	}
	t.Logf("a node crashed: slot-time used %.3f of the limit's", res.Report.Slots[0].Ratio)
}
