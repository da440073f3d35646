package bucket

import (
	"math"
	"time"
)

// SlidingLog admits up to limit tokens in any window-long span, exactly: it
// remembers when every admitted token went through. It suits small, strict
// limits ("5 login attempts per 15 minutes") where the approximation of
// SlidingWindow or the boundary burst of FixedWindow is not acceptable.
//
// The log holds one entry per admission, carrying the admission's cost, so a
// request of cost n is one entry, and admissions at the same instant share
// one. Each entry holds at least one token and the log at most limit tokens,
// so memory is bounded by limit entries; the ring grows on demand.
// A token admitted at instant a counts until a+window, exclusive.
//
// A SlidingLog is safe for concurrent use.
type SlidingLog struct {
	guard
	limit  int64
	window int64 // nanoseconds
	log    ring  // admissions still inside the window, oldest first
	total  int64 // tokens in log
	last   int64 // latest instant seen, Unix ns; entries are stamped with it
}

// NewSlidingLog returns an empty log of limit tokens per window.
func NewSlidingLog(limit int64, window time.Duration) (*SlidingLog, error) {
	if err := checkWindow("sliding log", limit, window); err != nil {
		return nil, err
	}
	l := &SlidingLog{limit: limit, window: int64(window), last: math.MinInt64}
	l.order = nextOrder()
	return l, nil
}

// Allow is AllowN(now, 1) reduced to its answer.
func (l *SlidingLog) Allow(now time.Time) bool {
	d, _ := l.AllowN(now, 1)
	return d.Allowed
}

// AllowN admits n tokens if the last window holds at most limit-n.
func (l *SlidingLog) AllowN(now time.Time, n int64) (Decision, error) {
	return decide(l, now, n)
}

// peekLocked decides as if the request were spent when allowed. Entries are
// stamped with the latest instant seen, so the log stays in time order even
// when a caller's clock is behind, and a late caller cannot shorten a
// token's stay.
func (l *SlidingLog) peekLocked(now time.Time, n int64) Decision {
	t := now.UnixNano()
	l.last = max(l.last, t)
	l.pruneLocked()
	lag := behind(l.last, t)
	d := Decision{Limit: l.limit, Remaining: l.limit - l.total}
	if n <= d.Remaining {
		d.Allowed = true
		d.Remaining -= n
		d.ResetAfter = addDurations(lag, time.Duration(l.window)) // this admission is the newest
		return d
	}
	d.RetryAfter = addDurations(lag, l.untilRoom(l.limit-n))
	d.ResetAfter = addDurations(lag, l.expiry(l.log.at(l.log.size-1)))
	return d
}

// pruneLocked drops the admissions that have left the window.
func (l *SlidingLog) pruneLocked() {
	for l.log.size > 0 && l.expiry(l.log.at(0)) == 0 {
		l.total -= l.log.at(0).n
		l.log.popFront()
	}
}

// untilRoom is how long until at most room tokens remain in the log: the
// expiry of the entry whose leaving brings the total down that far.
func (l *SlidingLog) untilRoom(room int64) time.Duration {
	left := l.total
	for i := 0; i < l.log.size; i++ {
		e := l.log.at(i)
		if left -= e.n; left <= room {
			return l.expiry(e)
		}
	}
	return 0 // not reached: the caller checked the cost against the limit
}

// expiry is how long after the latest instant seen entry e leaves the window.
// The difference is taken unsigned: last >= e.at always, and the span may
// exceed int64 for instants centuries apart.
func (l *SlidingLog) expiry(e entry) time.Duration {
	age := uint64(l.last - e.at)
	if age >= uint64(l.window) {
		return 0
	}
	return time.Duration(uint64(l.window) - age)
}

func (l *SlidingLog) spendLocked(n int64) {
	if l.log.size > 0 && l.log.back().at == l.last {
		l.log.back().n += n
	} else {
		l.log.push(entry{at: l.last, n: n}, l.limit)
	}
	l.total += n
}

func (l *SlidingLog) ceiling() int64 { return l.limit }

// entry is one admission: its instant and its cost.
type entry struct {
	at int64 // Unix ns
	n  int64
}

// ring is a FIFO of entries in a slice that wraps around, so pruning the
// oldest entry never moves the others.
type ring struct {
	buf  []entry
	head int // index of the oldest entry
	size int
}

func (r *ring) at(i int) entry { return r.buf[(r.head+i)%len(r.buf)] }

func (r *ring) back() *entry { return &r.buf[(r.head+r.size-1)%len(r.buf)] }

func (r *ring) popFront() {
	r.head = (r.head + 1) % len(r.buf)
	r.size--
}

// push appends e, growing the ring by doubling but never past limit entries,
// which is as many as the log can hold.
func (r *ring) push(e entry, limit int64) {
	if r.size == len(r.buf) {
		grown := make([]entry, int(min(int64(max(8, 2*len(r.buf))), limit)))
		for i := 0; i < r.size; i++ {
			grown[i] = r.at(i)
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = e
	r.size++
}
