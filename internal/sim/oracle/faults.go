package oracle

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// fault is a span of true time in which the world was faulty.
type fault struct {
	from, to time.Duration
	what     string
}

// Fault marks the world faulty over [from, to): a partition, a clock step,
// a crash, an allocator restart, a lossy network. A run with a fault is not
// calm (no accuracy verdict), and no 1-s check or fairness verdict is given
// for a window overlapping [from − L, to + L), L the rule's largest TTL or
// the call timeout if longer (see excuse): a lease granted before the
// fault may be spent in it, one granted in it after it, and a call sent
// into it times out after it. A fault may be recorded late, even after the events it
// excuses: a calm violation it excuses is withdrawn.
func (o *Oracle) Fault(from, to time.Duration, what string) {
	if to < from {
		o.usage(o.now, "", "", "fault %q ends at %v before it begins at %v", what, to, from)
		return
	}
	f := fault{from: from, to: to, what: what}
	i, _ := slices.BinarySearchFunc(o.faults, f, func(a, b fault) int { return cmp.Compare(a.from, b.from) })
	o.faults = slices.Insert(o.faults, i, f)
	if o.cfg.Trace != nil {
		o.cfg.Trace(fmt.Sprintf("oracle: fault [%v, %v): %s", from, to, what))
	}
}

// Cut says node was cut off from the allocator over [from, to). A cut is a
// partition: it is a fault (see Fault).
func (o *Oracle) Cut(node int, from, to time.Duration) {
	o.Fault(from, to, fmt.Sprintf("node %d cut off from the allocator", node))
}

// excuse is how long after a fault its effects last, L: the rule's
// largest TTL (a node cut off falls back until its next answer), or the
// call timeout if longer (a call sent into the fault falls back when it
// times out).
func (o *Oracle) excuse(rule string) time.Duration {
	l := o.cfg.CallTimeout
	if rs := o.rules[rule]; rs != nil {
		l = max(l, rs.maxTTL)
	}
	return l
}

// faulty says whether a fault may keep a node from the allocator at at: one
// is recorded over [from, to + L), L the excuse.
func (o *Oracle) faulty(rule string, at time.Duration) bool {
	l := o.excuse(rule)
	for _, f := range o.faults {
		if f.from > at {
			break
		}
		if at < f.to+l {
			return true
		}
	}
	return false
}

// calm says whether some window [s, s+w] with s in [lo, hi] overlaps no
// fault's excuse [from − L, to + L), L the excuse. Starts a fault rules
// out are [from − L − w, to + L); the faults are kept by from, so a sweep
// finds a start no fault rules out.
func (o *Oracle) calm(rule string, lo, hi, w time.Duration) bool {
	l := o.excuse(rule)
	p := lo
	for _, f := range o.faults {
		a, b := f.from-l-w, f.to+l
		if a > p {
			break // p is free, and every later fault starts after it
		}
		p = max(p, b)
		if p > hi {
			return false
		}
	}
	return p <= hi
}

// excused says whether the faults known now excuse a calm record.
func (o *Oracle) excused(r *record) bool {
	return r.calm && !o.calm(r.v.Rule, r.sLo, r.sHi, time.Second)
}

// storeStep is a step of the store's clock, over the store times it spans
// (before ≤ after whichever way it went).
type storeStep struct {
	at, before, after time.Duration
	ahead             bool // forward: a bucket refilled the step's worth
}

// StoreClockStep says the store's clock stepped at true time at from
// reading before to reading after (a failover to a replica whose clock is
// ahead, or behind). A step back changes no bound: the store keeps its
// windows and its log where they were (admissions are counted on its clock
// as it counts them, never going back). A step forward of d lets what the
// store lent before it be spent after it (docs/bounds.md, "Gaps, said"): a
// token bucket's bounds grow by its refill over the step, min(b, r·d), from
// the step on, and a window that the step's span [before, after + L]
// touches may take one limit more. Record it with a Fault as well: it is
// not calm.
//
// A step either way also misplaces, by the step, the store's windows on
// the clocks of the nodes that learned them before it: a node cut off
// counts its fallback allowance in windows off by the step until it hears
// from the allocator. A window the span [min(before, after), max(before,
// after) + L] touches is held to twice its limit whichever way the clock
// went.
//
// Further: a node that has not received a window rule's grant since the
// step (misplaced: a token bucket's grant names no window of the store's)
// counts its windows off by the step for as long, so every window that
// such a node's fallback admits in is held to twice its limit, the node's
// own fallback count to twice its part; and a step back of d
// stretches the store's window it lands in to P + d of true time (the
// store keeps its later window until its clock is back there), over which
// such a node counts 1 + ⌈d/P⌉ windows of its own: (1 + ⌈d/P⌉) times the
// limit, and the node's part.
func (o *Oracle) StoreClockStep(at, before, after time.Duration) {
	lo, hi := min(before, after), max(before, after)
	if after > before || lo < hi {
		o.forward = append(o.forward, storeStep{at: at, before: lo, after: hi, ahead: after > before})
	}
}

// steppedAhead reports whether the store's clock stepped forward at a true
// time in [from, to].
func (o *Oracle) steppedAhead(from, to time.Duration) bool {
	for _, s := range o.forward {
		if s.ahead && from <= s.at && s.at <= to {
			return true
		}
	}
	return false
}

// stepSpans reports whether a step of the store's clock spans store times
// in [from, to].
func (o *Oracle) stepSpans(from, to time.Duration) bool {
	for _, s := range o.forward {
		if s.before <= to && from <= s.after {
			return true
		}
	}
	return false
}

// misplaced says whether node, admitting on its fallback at at on a window
// rule of period p, counts its windows off: no window rule's grant has
// reached it since a step of the store's clock before at settled. A step
// forward settles at once; one back when the store's clock is back at the
// end of the window it kept (until then its grants name that window while
// its clock reads earlier, and teach the node windows off by the gap). It
// returns the largest such step back, or a nanosecond for one forward
// (which stretches no window); 0 for none.
func (o *Oracle) misplaced(node int, at, p time.Duration) time.Duration {
	var d time.Duration
	for _, s := range o.forward {
		settled := s.at
		if !s.ahead {
			settled += time.Duration(floorDiv(s.after, p)+1)*p - s.before
		}
		if s.at <= at && o.heard[node] < settled {
			back := time.Duration(1)
			if !s.ahead {
				back = max(s.after-s.before, 1)
			}
			d = max(d, back)
		}
	}
	return d
}

// stepped is the instant a token bucket's bounds judge an admission at:
// true time, moved later by each forward step of the store's clock before
// it, by the step or the time the bucket takes to refill, whichever is
// less (the refill the step gave the store).
func (o *Oracle) stepped(ks *keyState, at time.Duration) time.Duration {
	v := ks.rs.cur()
	fill := time.Duration(float64(v.Burst) / v.rate * 1e9)
	for _, s := range o.forward {
		if s.at <= at && s.ahead {
			at += min(s.after-s.before, fill)
		}
	}
	return at
}
