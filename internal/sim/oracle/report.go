package oracle

import (
	"cmp"
	"slices"
	"time"
)

// Checked counts what the oracle judged.
type Checked struct {
	Rules, Offered, Granted, Returned, Released int // events (Rules: SetRule calls)
	Admitted                                    int // admissions, of which:
	Lease, Fallback, Strict                     int // by mode,
	Unreserved                                  int // fallback ones held to the node's own bound
	// Settled counts the settlements above an estimate (Oracle.Settled),
	// SettledTokens what they counted.
	Settled       int
	SettledTokens int64
	// BeyondHorizon counts admissions checked only against part of their
	// windows: the store's clock stepped back past what the oracle keeps
	// of it (keepWindows store windows, logHorizon periods of a log).
	BeyondHorizon int
	// Dropped counts violations past the cap of 10,000 kept.
	Dropped int
}

// KeyAccuracy is one key's admissions against the ideal: what a perfect
// central limiter of the rule, fed the key's Offered events in order at
// their true time, would have admitted of them (docs/simulation.md).
type KeyAccuracy struct {
	Rule, Key                string
	Offered, Admitted, Ideal int64
	Ratio                    float64 // Admitted/Ideal; 0 when Ideal is 0
}

// Report is a run's verdict.
type Report struct {
	End time.Duration
	// Calm: no Fault nor Cut was recorded. Accuracy is a verdict on calm
	// runs only; the figures are given for every run.
	Calm   bool
	Faults int
	Keys   []KeyAccuracy // by rule, then key
	// Over every key.
	Offered, Admitted, Ideal int64
	Ratio                    float64
	Fairness                 []FairResult // in the order registered
	Slots                    []SlotUse    // concurrency keys' throughput, by rule, then key
	Checked                  Checked
	Violations               []Violation // as Violations, fairness's included
}

// Finish judges the fairness intervals (once) and reports the run up to
// end. It may be called again; events may not follow it.
func (o *Oracle) Finish(end time.Duration) Report {
	o.tick(end, "finish", "", "")
	r := Report{End: o.now, Calm: len(o.faults) == 0, Faults: len(o.faults)}
	r.Fairness = o.judgeFair()
	o.done = true
	for _, ks := range o.keys {
		a := ks.acc
		if a.offered == 0 && a.admitted == 0 {
			continue
		}
		r.Keys = append(r.Keys, KeyAccuracy{Rule: ks.id.rule, Key: ks.id.key, Offered: a.offered,
			Admitted: a.admitted, Ideal: a.ideal, Ratio: ratio(a.admitted, a.ideal)})
		r.Offered += a.offered
		r.Admitted += a.admitted
		r.Ideal += a.ideal
	}
	slices.SortFunc(r.Keys, func(a, b KeyAccuracy) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
	})
	r.Ratio = ratio(r.Admitted, r.Ideal)
	r.Slots = o.slotUse(r.End)
	slices.SortFunc(r.Slots, func(a, b SlotUse) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
	})
	r.Checked = o.checked
	r.Checked.Dropped = o.dropped
	r.Violations = o.Violations()
	return r
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
