package oracle

import (
	"slices"
	"sort"
	"time"
)

// windowSum checks a count bound over every window of length w of a
// coordinate x (true time or the store's clock): half-open (z − w, z], or
// closed [z − w, z]. Points come in any order of x; in the usual one (x
// not below the largest yet) a window sliding with the largest x makes
// each point amortized O(1). A point below it (the store's clock stepped
// back) is inserted in order and the windows containing it are judged one
// by one, in O(points within 2w).
//
// Each point carries its lookback version; a window is held to the bound
// of the oldest lookback among its points (ruleState.bound).
type windowSum struct {
	w, horizon time.Duration // horizon ≥ w: how far below the largest x points are kept
	closed     bool
	rs         *ruleState
	kind       boundKind
	n          int // the fleet size, for per-node bounds

	pts []wpt // pts[h:] are kept, ordered by x, ties in arrival order
	h   int
	ws  int   // the first point of the window ending at the largest x
	sum int64 // the costs of pts[ws:]
	mq  []int // indices in pts[ws:] with rising v: the window's oldest lookback first

	lost    time.Duration // the largest x forgotten
	hasLost bool
}

type wpt struct {
	x time.Duration
	c int64
	v int
}

// windowVerdict is a window check's answer for one point: ok, or the worst
// window (the points in [from, to]) with its sum and bound. beyond says
// that points this one shares a window with were already forgotten: it was
// checked against what is kept.
type windowVerdict struct {
	ok       bool
	beyond   bool
	from, to time.Duration
	sum      int64
	bound    float64
}

// windowEnds says whether a window of a windowSum holds the points at
// both its ends, [z−w, z], or only at its end, (z−w, z].
type windowEnds bool

const (
	bothEnds windowEnds = true  // [z−w, z]
	openEnd  windowEnds = false // (z−w, z]
)

func newWindowSum(rs *ruleState, kind boundKind, n int, w, horizon time.Duration, ends windowEnds) *windowSum {
	return &windowSum{w: w, horizon: max(horizon, w), closed: ends == bothEnds, rs: rs, kind: kind, n: n}
}

// in says whether a point at px lies in the window ending at z.
func (s *windowSum) in(px, z time.Duration) bool {
	if s.closed {
		return px >= z-s.w
	}
	return px > z-s.w
}

// add records c at x with lookback v and judges the windows containing it.
func (s *windowSum) add(x time.Duration, c int64, v int) windowVerdict {
	n := len(s.pts)
	if n > s.h && x < s.pts[n-1].x {
		return s.insert(x, c, v)
	}
	s.pts = append(s.pts, wpt{x: x, c: c, v: v})
	s.sum += c
	for !s.in(s.pts[s.ws].x, x) {
		s.sum -= s.pts[s.ws].c
		s.ws++
	}
	for len(s.mq) > 0 && s.pts[s.mq[len(s.mq)-1]].v >= v {
		s.mq = s.mq[:len(s.mq)-1]
	}
	s.mq = append(s.mq, n)
	for s.mq[0] < s.ws {
		s.mq = s.mq[1:]
	}
	vd := s.judge(s.pts[s.ws].x, x, s.sum, s.pts[s.mq[0]].v)
	s.forget(x)
	return vd
}

func (s *windowSum) judge(from, to time.Duration, sum int64, v int) windowVerdict {
	bd := s.rs.bound(s.kind, v, s.n)
	return windowVerdict{ok: !exceeds(float64(sum), bd), from: from, to: to, sum: sum, bound: bd}
}

// forget drops the points more than horizon below x that no longer count.
func (s *windowSum) forget(x time.Duration) {
	for s.h < s.ws && s.pts[s.h].x <= x-s.horizon {
		s.lost, s.hasLost = s.pts[s.h].x, true
		s.h++
	}
	if s.h > 64 && s.h > len(s.pts)/2 {
		s.pts = append(s.pts[:0], s.pts[s.h:]...)
		s.ws -= s.h
		for i := range s.mq {
			s.mq[i] -= s.h
		}
		s.h = 0
	}
}

// insert adds a point below the largest x, judges every window containing
// it (one per point z ≥ x within w above it, ending at z), and rebuilds the
// sliding window.
func (s *windowSum) insert(x time.Duration, c int64, v int) windowVerdict {
	pos := s.h + sort.Search(len(s.pts)-s.h, func(i int) bool { return s.pts[s.h+i].x > x })
	s.pts = slices.Insert(s.pts, pos, wpt{x: x, c: c, v: v})
	best := windowVerdict{ok: true, beyond: s.hasLost && s.in(s.lost, x)}
	l := s.h + sort.Search(pos-s.h, func(i int) bool { return s.in(s.pts[s.h+i].x, x) })
	var sum int64
	var mq []int
	next := l // the next point to enter the window
	for j := pos; j < len(s.pts) && s.in(x, s.pts[j].x); j++ {
		z := s.pts[j].x
		for ; next <= j; next++ {
			sum += s.pts[next].c
			for len(mq) > 0 && s.pts[mq[len(mq)-1]].v >= s.pts[next].v {
				mq = mq[:len(mq)-1]
			}
			mq = append(mq, next)
		}
		for !s.in(s.pts[l].x, z) {
			sum -= s.pts[l].c
			l++
		}
		for mq[0] < l {
			mq = mq[1:]
		}
		if j+1 < len(s.pts) && s.pts[j+1].x == z {
			continue // the window ending at z holds the points after j at z too
		}
		vd := s.judge(s.pts[l].x, z, sum, s.pts[mq[0]].v)
		if !vd.ok && (best.ok || float64(vd.sum)-vd.bound > float64(best.sum)-best.bound) {
			vd.beyond = best.beyond
			best = vd
		}
	}
	s.rebuild()
	return best
}

// rebuild finds the window ending at the largest x again.
func (s *windowSum) rebuild() {
	last := s.pts[len(s.pts)-1].x
	s.ws = s.h + sort.Search(len(s.pts)-s.h, func(i int) bool { return s.in(s.pts[s.h+i].x, last) })
	s.sum, s.mq = 0, s.mq[:0]
	for i := s.ws; i < len(s.pts); i++ {
		s.sum += s.pts[i].c
		for len(s.mq) > 0 && s.pts[s.mq[len(s.mq)-1]].v >= s.pts[i].v {
			s.mq = s.mq[:len(s.mq)-1]
		}
		s.mq = append(s.mq, i)
	}
}
