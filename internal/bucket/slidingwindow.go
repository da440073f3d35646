package bucket

import (
	"math"
	"time"
)

// SlidingWindow is the sliding window counter: two epoch-aligned window
// counts stand in for a log. It estimates the tokens in the last window-long
// span as
//
//	previous × (part of the previous window still inside the span) + current
//
// and admits n when estimate + n <= limit. That assumes the previous window's
// traffic was spread evenly; it is cheap, and it removes the fixed window's
// double burst at the boundary, because the previous window's count weighs
// almost fully just after the boundary.
//
// The estimate is compared exactly, in integers: Remaining is
// limit - current - ceil(previous × overlap / window).
//
// A SlidingWindow is safe for concurrent use.
type SlidingWindow struct {
	guard
	limit  int64
	window int64 // nanoseconds
	start  int64 // the current window's start, Unix ns, a multiple of window
	prev   int64 // tokens admitted in the window before start
	curr   int64 // tokens admitted since start
	last   int64 // latest instant seen, Unix ns
}

// NewSlidingWindow returns an empty counter of limit tokens per window.
func NewSlidingWindow(limit int64, window time.Duration) (*SlidingWindow, error) {
	if err := checkWindow("sliding window", limit, window); err != nil {
		return nil, err
	}
	// Both counts are zero, so whichever window the first call rolls to
	// starts empty; start needs no special "unset" value.
	w := &SlidingWindow{limit: limit, window: int64(window), last: math.MinInt64}
	w.order = nextOrder()
	return w, nil
}

// Allow is AllowN(now, 1) reduced to its answer.
func (w *SlidingWindow) Allow(now time.Time) bool {
	d, _ := w.AllowN(now, 1)
	return d.Allowed
}

// AllowN admits n tokens if the estimate leaves room for them.
func (w *SlidingWindow) AllowN(now time.Time, n int64) (Decision, error) {
	return decide(w, now, n)
}

// advanceLocked moves to the window holding the latest instant seen; a
// caller behind it counts in it, never in a window already left.
func (w *SlidingWindow) advanceLocked(t int64) {
	w.last = max(w.last, t)
	s := alignDown(w.last, w.window)
	if s == w.start {
		return
	}
	if s-w.start == w.window {
		w.prev = w.curr
	} else {
		w.prev = 0 // idle for a whole window or more
	}
	w.curr, w.start = 0, s
}

// peekLocked decides as if the request were spent when allowed.
func (w *SlidingWindow) peekLocked(now time.Time, n int64) Decision {
	t := now.UnixNano()
	w.advanceLocked(t)
	lag := behind(w.last, t)
	elapsed := w.last - w.start // 0 <= elapsed < window
	d := Decision{Limit: w.limit, Remaining: w.limit - w.curr - w.weighted(w.prev, elapsed)}
	if n <= d.Remaining {
		d.Allowed = true
		d.Remaining -= n
		d.ResetAfter = addDurations(lag, w.untilEmpty(w.curr+n, elapsed))
		return d
	}
	d.Remaining = max(d.Remaining, 0)
	d.RetryAfter = addDurations(lag, w.untilRoom(n, elapsed))
	d.ResetAfter = addDurations(lag, w.untilEmpty(w.curr, elapsed))
	return d
}

// weighted is ceil(count × (window-elapsed) / window): the previous window's
// share of the span, rounded up so the estimate never undercounts.
func (w *SlidingWindow) weighted(count, elapsed int64) int64 {
	q, inexact := mulDiv(uint64(count), uint64(w.window-elapsed), uint64(w.window))
	if inexact {
		q++
	}
	return int64(q)
}

// untilRoom is how long until a cost of n fits: later in this window if the
// previous window's fading share is in the way, else in the next window once
// this window's count, now the previous one, has faded enough.
func (w *SlidingWindow) untilRoom(n, elapsed int64) time.Duration {
	if room := w.limit - w.curr - n; room >= 0 {
		return time.Duration(w.fadedAt(w.prev, room) - elapsed)
	}
	toNext := time.Duration(w.window - elapsed)
	return addDurations(toNext, time.Duration(w.fadedAt(w.curr, w.limit-n)))
}

// fadedAt is the first elapsed time in a window at which a previous count
// weighs at most room: count × (window-e) <= room × window, that is
// e = window - floor(room × window / count). Callers pass room < count.
func (w *SlidingWindow) fadedAt(count, room int64) int64 {
	if room >= count {
		return 0
	}
	q, _ := mulDiv(uint64(room), uint64(w.window), uint64(count))
	return w.window - int64(q)
}

// untilEmpty is how long until the estimate is back to zero, given curr
// tokens in the current window: the end of the next window if this one holds
// any, since they weigh on all of it, else the end of this one.
func (w *SlidingWindow) untilEmpty(curr, elapsed int64) time.Duration {
	rest := time.Duration(w.window - elapsed)
	switch {
	case curr > 0:
		return addDurations(rest, time.Duration(w.window))
	case w.prev > 0:
		return rest
	}
	return 0
}

func (w *SlidingWindow) spendLocked(n int64) {
	w.curr += n
}

func (w *SlidingWindow) ceiling() int64 { return w.limit }
