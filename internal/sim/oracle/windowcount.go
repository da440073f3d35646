package oracle

import (
	"slices"
	"time"
)

// keepWindows is how many of a key's most recent store windows the oracle
// remembers: an admission into an older one (the store's clock stepped back
// further) cannot be checked and is counted as beyond the horizon.
const keepWindows = 8

// windowCounts counts admissions per store window [kP, (k+1)P), k =
// ⌊storeAt/P⌋, and holds each to a bound: l for the fleet, ⌈l/N⌉ for one
// node's unreserved fallback. A window is held to the largest limit among
// its admissions' lookbacks and later versions.
type windowCounts struct {
	p    time.Duration
	rs   *ruleState
	kind boundKind
	n    int
	ws   []wcount // ascending k, at most keepWindows
	// forward are the store clock's steps forward: the windows their spans
	// touch may take one limit more (see Oracle.StoreClockStep).
	forward *[]storeStep
}

type wcount struct {
	k, sum int64
	v      int // the oldest lookback among the window's admissions
	// misplaced: a node that counted its windows off by a store clock
	// step of this much admitted in it (Oracle.StoreClockStep): ⌈d/P⌉
	// limits more (one for a step forward, or back by less than P).
	misplaced time.Duration
}

// countVerdict is a window count's answer: ok, or the window's count and
// bound; beyond says the window was forgotten and nothing was checked.
type countVerdict struct {
	ok, beyond bool
	k, sum     int64
	bound      float64
}

func newWindowCounts(rs *ruleState, kind boundKind, n int, p time.Duration) *windowCounts {
	return &windowCounts{p: p, rs: rs, kind: kind, n: n}
}

// add counts c in the window of storeAt, with lookback v; misplaced, if
// not 0, says it came from a node counting its windows off by a store clock
// step of that much.
func (wc *windowCounts) add(storeAt time.Duration, c int64, v int, misplaced time.Duration) countVerdict {
	k := floorDiv(storeAt, wc.p)
	i, found := slices.BinarySearchFunc(wc.ws, k, func(w wcount, k int64) int {
		switch {
		case w.k < k:
			return -1
		case w.k > k:
			return 1
		}
		return 0
	})
	if !found {
		if i == 0 && len(wc.ws) == keepWindows {
			return countVerdict{ok: true, beyond: true, k: k}
		}
		wc.ws = slices.Insert(wc.ws, i, wcount{k: k, v: v})
		if len(wc.ws) > keepWindows {
			wc.ws = slices.Delete(wc.ws, 0, 1)
			i--
		}
	}
	w := &wc.ws[i]
	w.sum += c
	w.v = min(w.v, v)
	w.misplaced = max(w.misplaced, misplaced)
	bd := wc.rs.bound(wc.kind, w.v, wc.n)
	if w.misplaced > 0 {
		extra := (w.misplaced + wc.p - 1) / wc.p // ⌈d/P⌉: at least one
		bd += float64(extra) * wc.rs.bound(wc.kind, w.v, wc.n)
	} else if wc.forward != nil {
		lo, hi := time.Duration(k)*wc.p, time.Duration(k+1)*wc.p
		for _, s := range *wc.forward {
			if s.before < hi && lo < s.after+wc.rs.maxTTL {
				bd += wc.rs.bound(wc.kind, w.v, wc.n)
				break
			}
		}
	}
	return countVerdict{ok: !exceeds(float64(w.sum), bd), k: k, sum: w.sum, bound: bd}
}
