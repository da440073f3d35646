package sim

import (
	"fmt"
	"strings"
	"testing"
)

// logSlots reports the runs with a concurrency rule: how many, how many
// calm, and the calm runs' throughput (slot-time used over the limit's,
// from each key's first take): reported, not judged.
func logSlots(t *testing.T, list []uint64, results []Result) {
	n, calm := 0, 0
	var low []string
	lo, sum := 1.0, 0.0
	for i, r := range results {
		if len(r.Report.Slots) == 0 {
			continue
		}
		n++
		if !r.Report.Calm {
			continue
		}
		calm++
		for _, u := range r.Report.Slots {
			lo, sum = min(lo, u.Ratio), sum+u.Ratio/float64(len(r.Report.Slots))
			if u.Ratio < 0.8 {
				low = append(low, fmt.Sprintf("%d/%s %.2f", list[i], u.Key, u.Ratio))
			}
		}
	}
	if calm == 0 {
		t.Logf("concurrency: %d runs, none calm", n)
		return
	}
	t.Logf("concurrency: %d runs, %d calm: slot-time used over the limit's %.3f on average, %.3f at least; below 0.8: %s",
		n, calm, sum/float64(calm), lo, strings.Join(low, ", "))
}

// TestSlotSeeds runs only the seeds of -from/-seeds that draw a
// concurrency rule, each on a line.
func TestSlotSeeds(t *testing.T) {
	if !testing.Verbose() {
		t.Skip("run with -v -run TestSlotSeeds")
	}
	var list []uint64
	for s := *fromSeed; s < *fromSeed+uint64(*seeds); s++ {
		if slotsDrawn(s) {
			list = append(list, s)
		}
	}
	results := runAll(list)
	for i, r := range results {
		if len(r.Violations) > 0 {
			t.Errorf("%s", r)
			continue
		}
		var use []string
		for _, u := range r.Report.Slots {
			use = append(use, fmt.Sprintf("%s %.3f", u.Key, u.Ratio))
		}
		t.Logf("seed %d: calm=%v use %s; %s", list[i], r.Report.Calm, strings.Join(use, " "), r.Scenario)
	}
	logSlots(t, list, results)
}
