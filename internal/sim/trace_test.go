package sim

import (
	"fmt"
	"testing"
)

// A run kept untraced is the run traced: Run plays a failing seed again,
// traced, for its account, and that account must be of the same run.
func TestTraceChangesNothing(t *testing.T) {
	for _, seed := range []uint64{5, 23, 99, 8368} {
		a, b := runScenario(seed, NewScenario(seed), 0), RunScenario(seed, NewScenario(seed))
		if a.Report.Admitted != b.Report.Admitted || a.Stats != b.Stats || fmt.Sprint(a.Violations) != fmt.Sprint(b.Violations) {
			t.Errorf("seed %d: untraced %+v %d violations, traced %+v %d violations", seed, a.Stats, len(a.Violations), b.Stats, len(b.Violations))
		}
	}
}
