package main

import (
	"fmt"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// What a run admitted, against the ideal and the bounds.

// lossByDemand says where the admissions short of the ideal were lost:
// on keys offered less than half what the rule lets through over the run
// (the long tail), on keys near it (half to twice), and on keys offered
// more, as shares of the whole ideal.
func lossByDemand(res *result, r *rules.Rule, ideal float64) string {
	capacity := float64(r.Burst) + r.Rate()*res.elapsed.Seconds()
	var lost [3]float64
	var keys [3]int
	for k, off := range res.perKeyOff {
		if off == 0 {
			continue
		}
		class := 0
		switch {
		case float64(off) > 2*capacity:
			class = 2
		case float64(off) >= capacity/2:
			class = 1
		}
		keys[class]++
		lost[class] += min(float64(off), capacity) - min(float64(res.perKeyAdm[k]), capacity)
	}
	return fmt.Sprintf("short of the ideal: %.4f on %d keys offered under half their limit, %.4f on %d near it, %.4f on %d above twice it",
		lost[0]/ideal, keys[0], lost[1]/ideal, keys[1], lost[2]/ideal, keys[2])
}

// admittedAfter counts admissions after the warm-up: from the timeline for
// one key, else in proportion to time.
func admittedAfter(res *result, warm time.Duration) int64 {
	if res.perKeyOff == nil {
		var n int64
		for i := int(warm / binWidth); i < len(res.bins); i++ {
			n += res.bins[i]
		}
		return n
	}
	return int64(float64(res.admitted) * (1 - warm.Seconds()/res.elapsed.Seconds()))
}

// ideal is what a perfect limiter would admit: per key, the offered load or
// the burst plus the rate over the run, whichever is less.
func ideal(res *result, r *rules.Rule) float64 {
	capacity := float64(r.Burst) + r.Rate()*res.elapsed.Seconds()
	if res.perKeyOff == nil {
		return min(float64(res.offered), capacity)
	}
	total := 0.0
	for _, off := range res.perKeyOff {
		total += min(float64(off), capacity)
	}
	return total
}

// worstWindow is the most admitted in any one-second window of the
// timeline over bound, the most a token bucket admits in a second (its
// burst plus a second of its rate): above 1 is over-admission.
func worstWindow(bins []int64, bound float64) float64 {
	per := int(time.Second / binWidth)
	worst := int64(0)
	for start := 0; start+per <= len(bins); start++ {
		var n int64
		for _, b := range bins[start : start+per] {
			n += b
		}
		worst = max(worst, n)
	}
	return float64(worst) / bound
}

func sum(xs []float64) (s float64) {
	for _, x := range xs {
		s += x
	}
	return s
}
