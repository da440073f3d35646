package sim

import (
	"testing"
	"time"
)

// Two reloads 0.5 s apart, each reaching every node within two seconds of
// its own: a node that fetches the rules after the second one gets the
// second one's, whichever reload's delivery comes last to it. Before, each
// delivery carried the set of its own reload, so a node whose first
// delivery came after its second went back to the first reload's rule and
// kept it, while the oracle was told every node had the second (seed
// 53808: node 4 took 25/s at 2.70 s, 50/s at 2.93 s, and fell back at
// b/N 5, r/N 5 held to 25/s's 4 + 2.5/s: 5 > 4.19).
func TestReloadsReachNodesInOrder(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		sc := fleetScenario(t, bucket1000, 10*time.Millisecond, 0.5, 6*time.Second)
		sc.Faults.add(sc, time.Second, "reload", "(x0.5)", func(w *World) { w.reload(0.5) })
		sc.Faults.add(sc, 1500*time.Millisecond, "reload", "(x0.5)", func(w *World) { w.reload(0.5) })
		w := newWorld(seed, sc, 0)
		w.start()
		for w.events.Len() > 0 {
			e := w.events.pop()
			if e.at > sc.Length {
				break
			}
			w.now = e.at
			e.fn()
		}
		want, _ := w.rules.Get("r")
		for _, n := range w.nodes {
			if got := n.tables["r"].Rule(); got.Limit != want.Limit {
				t.Errorf("seed %d: node %d decides under %d/s after both reloads, want %d/s", seed, n.i, got.Limit, want.Limit)
			}
		}
		if rep := w.oracle.Finish(sc.Length); len(rep.Violations) > 0 {
			t.Errorf("seed %d: %d violations, the first %v", seed, len(rep.Violations), rep.Violations[0])
		}
		w.close()
	}
}
