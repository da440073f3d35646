package oracle

import "time"

// accuracy is a key's admitted and offered costs and what a perfect
// central limiter, fed every Offered event in order at its true time,
// would have admitted of them: the ideal.
//
//   - token bucket: an exact bucket of capacity b refilling at r, full at
//     the first offer, admitting a request when it holds its cost;
//   - fixed window: per window ⌊at/P⌋ of true time (an offer has no store
//     time), a request is admitted when it fits in l: with cost 1,
//     min(offered in the window, l);
//   - sliding window: the same windows, and the classic counter over them,
//     admitting when the previous window's count weighted by the part of
//     it the sliding window still covers, plus the current one's and the
//     request's, fit in l. (min(offered, l) a window, as docs/simulation.md
//     says, is more than any sliding window counter admits under a steady
//     overload: it counts each window as if the one before were empty.)
//   - sliding log: an exact log, admitting when the costs admitted in
//     (at − P, at] and the request's fit in l.
//
// Each limiter follows the version in force at the offer: a reload caps
// the bucket at the new b and refills at the new r from then on, and a
// window or log holds what it holds to the new l. A new epoch (another
// algorithm or period) starts the limiter afresh, full.
type accuracy struct {
	offered, admitted, ideal int64

	started bool
	// token bucket
	tokens float64
	last   time.Duration
	// fixed and sliding window
	k, count, prev int64
	// sliding log
	log  []wpt
	head int
	sum  int64
}

// reset starts the ideal limiter afresh, keeping the counts.
func (a *accuracy) reset() {
	a.started, a.log, a.head, a.sum = false, nil, 0, 0
}

// offer feeds the ideal limiter a request of cost at at under version v.
func (a *accuracy) offer(v *version, at time.Duration, cost int64) {
	a.offered += cost
	if a.fits(v, at, cost) {
		a.ideal += cost
	}
}

func (a *accuracy) fits(v *version, at time.Duration, cost int64) bool {
	switch v.Algorithm {
	case TokenBucket:
		b := float64(v.Burst)
		if !a.started {
			a.started, a.tokens = true, b
		} else {
			a.tokens = min(b, a.tokens+v.rate*(at-a.last).Seconds())
		}
		a.last = at
		if a.tokens+1e-9 < float64(cost) {
			return false
		}
		a.tokens -= float64(cost)
	case FixedWindow:
		if k := floorDiv(at, v.Period); !a.started || k != a.k {
			a.started, a.k, a.count = true, k, 0
		}
		if a.count+cost > v.Limit {
			return false
		}
		a.count += cost
	case SlidingWindow:
		k := floorDiv(at, v.Period)
		switch {
		case !a.started:
			a.started, a.k, a.count, a.prev = true, k, 0, 0
		case k == a.k+1:
			a.k, a.prev, a.count = k, a.count, 0
		case k != a.k:
			a.k, a.prev, a.count = k, 0, 0
		}
		into := float64(at-time.Duration(k)*v.Period) / float64(v.Period)
		if float64(a.prev)*(1-into)+float64(a.count+cost) > float64(v.Limit)+1e-9 {
			return false
		}
		a.count += cost
	case SlidingLog:
		for a.head < len(a.log) && a.log[a.head].x <= at-v.Period {
			a.sum -= a.log[a.head].c
			a.head++
		}
		if a.head > 64 && a.head > len(a.log)/2 {
			a.log, a.head = append(a.log[:0], a.log[a.head:]...), 0
		}
		if a.sum+cost > v.Limit {
			return false
		}
		a.log = append(a.log, wpt{x: at, c: cost})
		a.sum += cost
	}
	return true
}
