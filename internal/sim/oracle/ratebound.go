package oracle

import "sort"

// rateBound checks a token bucket's bound over every window of
// admissions: A[t1, t2] ≤ b + r·(t2 − t1 + L) for all t1 ≤ t2, both ends
// included. With S(t) what was admitted up to t, it is
//
//	S(t2) − r·t2 − min over t1 ≤ t2 of (S(t1−) − r·t1) ≤ b + r·L,
//
// and the minimum is taken at admission instants: a running minimum makes
// each admission O(1).
//
// A rule reload changes b, r and L. A window is held to the largest terms
// among the versions its admissions look back to (ruleState.lookback) and
// every later one, so admissions are kept in groups by lookback, each with
// its terms folded over the versions since. When a reload raises a group's
// r, its minimum is found again on the lower convex hull of its points
// (t, S(t−)) in O(log h). Groups whose terms become equal merge; there are
// as many as distinct suffix maxima of the epoch's versions, one without
// reloads.
type rateBound struct {
	groups  []rateGroup
	total   int64   // S: every cost admitted so far
	lastT   float64 // the last instant
	started bool
}

// hullPt is an admission instant t (in nanoseconds) and S(t−), what was
// admitted before it.
type hullPt struct{ t, s float64 }

// rateGroup holds the instants whose lookback is in [lo, hi].
type rateGroup struct {
	lo, hi int
	upto   int    // the newest version folded into p
	p      params // the largest terms among versions lo..upto
	hull   []hullPt
	min    hullPt // the instant minimizing s − p.r·t
}

// rateVerdict is a rate bound's answer for one admission: ok, or the worst
// window [from, to] with what it admitted and its bound.
type rateVerdict struct {
	ok                 bool
	from, to           float64
	measured, boundVal float64
}

// admit records cost admitted at t (nanoseconds, not before the last call)
// with lookback vlo, and checks every window that ends at t. perNode is 0
// for the fleet's bound and N for one node's unreserved fallback.
func (rb *rateBound) admit(rs *ruleState, perNode int, t float64, cost int64, vlo int) rateVerdict {
	cur := len(rs.vers) - 1
	rb.fold(rs, perNode, cur)
	if !rb.started || t > rb.lastT {
		rb.addPoint(rs, perNode, cur, hullPt{t: t, s: float64(rb.total)}, vlo)
		rb.lastT, rb.started = t, true
	}
	rb.total += cost
	v := rateVerdict{ok: true, to: t}
	worst := 0.0
	for i := range rb.groups {
		g := &rb.groups[i]
		m := float64(rb.total) - g.min.s
		bd := g.p.b + g.p.r*(t-g.min.t+g.p.l)
		if exceeds(m, bd) && (v.ok || m-bd > worst) {
			v = rateVerdict{from: g.min.t, to: t, measured: m, boundVal: bd}
			worst = m - bd
		}
	}
	return v
}

// addPoint puts an instant in the group of its lookback, a new one when
// its lookback is past the last group's (lookbacks only grow).
func (rb *rateBound) addPoint(rs *ruleState, perNode, cur int, p hullPt, vlo int) {
	n := len(rb.groups)
	if n == 0 || vlo > rb.groups[n-1].hi {
		g := rateGroup{lo: vlo, hi: vlo, upto: cur, p: rs.rateParams(vlo, perNode), min: p}
		for v := vlo + 1; v <= cur; v++ {
			g.p = g.p.max(rs.rateParams(v, perNode))
		}
		if n > 0 && rb.groups[n-1].p == g.p {
			rb.groups[n-1].hi = vlo // same terms from now on: one group
		} else {
			rb.groups = append(rb.groups, g)
			n++
		}
	}
	g := &rb.groups[n-1]
	g.hull = hullAdd(g.hull, p)
	if p.s-g.p.r*p.t < g.min.s-g.p.r*g.min.t {
		g.min = p
	}
}

// fold brings every group's terms up to version cur, finds the minimum of
// a group whose rate rose again on its hull, and merges neighbours whose
// terms became equal.
func (rb *rateBound) fold(rs *ruleState, perNode, cur int) {
	if len(rb.groups) == 0 || rb.groups[len(rb.groups)-1].upto == cur {
		return // no reload since the last admission
	}
	for i := range rb.groups {
		g := &rb.groups[i]
		r := g.p.r
		for v := g.upto + 1; v <= cur; v++ {
			g.p = g.p.max(rs.rateParams(v, perNode))
		}
		g.upto = cur
		if g.p.r != r {
			g.min = hullMin(g.hull, g.p.r)
		}
	}
	out := rb.groups[:1]
	for _, g := range rb.groups[1:] {
		last := &out[len(out)-1]
		if last.p != g.p {
			out = append(out, g)
			continue
		}
		// The group's instants all follow last's: extend last's hull.
		last.hi = g.hi
		for _, p := range g.hull {
			last.hull = hullAdd(last.hull, p)
		}
		if g.min.s-g.p.r*g.min.t < last.min.s-last.p.r*last.min.t {
			last.min = g.min
		}
	}
	rb.groups = out
}

// hullAdd adds p, later than every point of h, to the lower convex hull h.
func hullAdd(h []hullPt, p hullPt) []hullPt {
	for n := len(h); n >= 2; n-- {
		a, b := h[n-2], h[n-1]
		if (b.t-a.t)*(p.s-a.s)-(b.s-a.s)*(p.t-a.t) > 0 {
			break // a left turn: b stays on the hull
		}
		h = h[:n-1]
	}
	return append(h, p)
}

// hullMin is the point of the lower hull h minimizing s − r·t: along the
// hull the slopes rise, and the minimum is where they pass r.
func hullMin(h []hullPt, r float64) hullPt {
	i := sort.Search(len(h)-1, func(i int) bool {
		return h[i+1].s-h[i].s >= r*(h[i+1].t-h[i].t)
	})
	return h[i]
}
