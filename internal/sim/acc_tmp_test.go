package sim

import "testing"

func TestAccList(t *testing.T) {
	if !*triage {
		t.Skip()
	}
	var list []uint64
	for s := uint64(1); s <= 300; s++ {
		list = append(list, s)
	}
	for i, r := range runAll(list) {
		if r.accuracyMissed() {
			t.Logf("seed %d %.3f %s", list[i], r.Report.Ratio, r.Scenario)
		}
	}
}
