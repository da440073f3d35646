package oracle

import (
	"fmt"
	"math"
	"time"
)

// fairMinMean is the mean below which a fairness interval is reported but
// not judged: too few admissions for ±10% to mean anything.
const fairMinMean = 20

// fairWin is one ExpectFair interval and what its nodes admitted in it.
type fairWin struct {
	id        keyID
	from, to  time.Duration // counted: [from, to), from already past the settling
	nodes     []int
	admitted  []int64
	late, bad bool
}

// FairResult is the verdict on one ExpectFair interval.
type FairResult struct {
	Rule, Key string
	// From and To are the span counted: [from + TTL/5, to), two refresh
	// intervals of TTL/10 after the interval's start.
	From, To time.Duration
	Nodes    []int
	Admitted []int64 // what each node admitted in the span, by Nodes
	Mean     float64
	// Judged: the interval was registered before the span began, no fault
	// excuse overlaps it, and the mean is at least 20 admissions.
	Judged bool
	Fair   bool // every node within ±10% of the mean
}

// ExpectFair says that nodes offered (rule, key) equal demand over
// [from, to): their admissions in it, from two refresh intervals (TTL/5)
// after from, must be within ±10% of their mean. Call it before any event
// at from + TTL/5; the verdict is given at Finish.
func (o *Oracle) ExpectFair(from, to time.Duration, rule, key string, nodes []int) {
	ks := o.key(o.now, rule, key)
	if ks == nil {
		return
	}
	f := fairWin{id: ks.id, from: from + ks.rs.cur().TTL/5, to: to, nodes: append([]int(nil), nodes...)}
	f.admitted = make([]int64, len(nodes))
	switch {
	case len(nodes) < 2 || f.to <= f.from:
		o.usage(o.now, rule, key, "fairness interval [%v, %v) of %d nodes: nothing to compare", f.from, to, len(nodes))
		f.bad = true
	case f.from < o.now:
		o.usage(o.now, rule, key, "fairness interval from %v recorded at %v: its admissions were not counted", f.from, o.now)
		f.late = true
	}
	o.fair = append(o.fair, f)
	ks.fair = append(ks.fair, len(o.fair)-1)
}

// countFair counts an admission in the fairness intervals it falls in.
func (o *Oracle) countFair(ks *keyState, at time.Duration, node int, cost int64) {
	for _, i := range ks.fair {
		f := &o.fair[i]
		if at < f.from || at >= f.to {
			continue
		}
		for j, n := range f.nodes {
			if n == node {
				f.admitted[j] += cost
			}
		}
	}
}

// judgeFair gives every interval's verdict, recording the unfair ones.
func (o *Oracle) judgeFair() []FairResult {
	out := make([]FairResult, 0, len(o.fair))
	for i := range o.fair {
		f := &o.fair[i]
		r := FairResult{Rule: f.id.rule, Key: f.id.key, From: f.from, To: f.to, Nodes: f.nodes, Admitted: f.admitted, Fair: true}
		if f.bad {
			out = append(out, r)
			continue
		}
		var sum int64
		for _, a := range f.admitted {
			sum += a
		}
		r.Mean = float64(sum) / float64(len(f.admitted))
		worst, dev := 0, 0.0
		for j, a := range f.admitted {
			if d := math.Abs(float64(a) - r.Mean); d > dev {
				worst, dev = j, d
			}
		}
		r.Fair = !exceeds(dev, 0.1*r.Mean)
		r.Judged = !f.late && r.Mean >= fairMinMean && o.calm(f.id.rule, f.from, f.from, f.to-f.from)
		if r.Judged && !r.Fair && !o.done {
			o.breach(o.keys[f.id], Violation{Invariant: InvFairness, Node: f.nodes[worst], From: f.from, To: f.to, At: o.now,
				Measured: dev, Bound: 0.1 * r.Mean,
				Detail: fmt.Sprintf("node %d admitted %d against a mean of %.1f over %v", f.nodes[worst], f.admitted[worst], r.Mean, f.nodes)}, record{})
			o.keys[f.id].pass(InvFairness, f.nodes[worst]) // each interval is its own verdict
		}
		out = append(out, r)
	}
	return out
}
