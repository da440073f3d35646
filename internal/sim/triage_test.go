package sim

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
)

var triage = flag.Bool("triage", false, "TestTriage: sort the failing seeds by what broke")

// TestTriage sorts failing seeds by the invariant they broke and what the
// scenario held, to find the causes behind many failures (a tool, run by
// hand with -triage).
func TestTriage(t *testing.T) {
	if !*triage {
		t.Skip("run with -triage")
	}
	var list []uint64
	for s := *fromSeed; s < *fromSeed+uint64(*seeds); s++ {
		list = append(list, s)
	}
	by := map[string][]uint64{}
	for i, r := range runAll(list) {
		if !r.Failed() {
			continue
		}
		seen := map[string]bool{}
		for _, v := range r.Violations {
			seen[string(v.Invariant)] = true
		}
		if r.accuracyMissed() {
			seen["accuracy"] = true
		}
		for inv := range seen {
			by[inv] = append(by[inv], list[i])
		}
	}
	var keys []string
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kinds := map[string]int{}
		for _, s := range by[k] {
			for _, kd := range NewScenario(s).Kinds() {
				kinds[kd]++
			}
		}
		var ks []string
		for kd, n := range kinds {
			ks = append(ks, fmt.Sprintf("%s=%d", kd, n))
		}
		slices.Sort(ks)
		t.Logf("%s: %d seeds, e.g. %v\n    %s", k, len(by[k]), by[k][:min(8, len(by[k]))], strings.Join(ks, " "))
	}
}
