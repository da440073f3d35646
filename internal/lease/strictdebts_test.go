package lease

import (
	"testing"
	"time"
)

// A strict rule's fallback admissions make one report per key, summed and
// dated by the first: the allocator refuses a call that names a key twice,
// and bounds what a report debits by its age. (The simulator once kept one
// report per admission: its calls were refused whole, its debts grew with
// every admission of a long cut: a sweep of 5,000 seeds took more than
// half an hour, where others take ten minutes.)
func TestStrictDebtsReportOncePerKey(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var d StrictDebts
	d.Add("r", "a", 2, t0)
	d.Add("r", "a", 3, t0.Add(time.Second))
	d.Add("r", "b", 1, t0.Add(2*time.Second))
	d.AddSettled("r", "a", 7, t0.Add(3*time.Second))
	reqs := d.Take(t0.Add(4 * time.Second))
	if len(reqs) != 2 || d.Pending() {
		t.Fatalf("%d reports (pending after: %v), want one per key", len(reqs), d.Pending())
	}
	for _, r := range reqs {
		switch r.Key {
		case "a":
			if r.Consumed != 5 || r.Settled != 7 || r.ConsumedAge != 4*time.Second {
				t.Fatalf("a's report %+v, want 5 consumed since 4 s ago and 7 settled", r)
			}
		case "b":
			if r.Consumed != 1 || r.ConsumedAge != 2*time.Second {
				t.Fatalf("b's report %+v, want 1 consumed 2 s ago", r)
			}
		}
	}
	// A report that did not reach the allocator goes back with its age, and
	// merges with what was admitted since.
	d.Restore(reqs, t0.Add(4*time.Second))
	d.Add("r", "a", 1, t0.Add(5*time.Second))
	for _, r := range d.Take(t0.Add(6 * time.Second)) {
		if r.Key == "a" && (r.Consumed != 6 || r.ConsumedAge != 6*time.Second) {
			t.Fatalf("a's report again %+v, want 6 consumed since 6 s ago", r)
		}
	}
}
