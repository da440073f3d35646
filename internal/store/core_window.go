package store

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// The fixed and sliding windows' part of the reference semantics (see
// core.go).

// window is a fixed or sliding window's state: the window it counts in,
// and what it counted there and, for a sliding window, in the one before.
type window struct {
	index int64   // floor(start/period), or a calendar window's start in µs
	count float64 // tokens counted in the window
	prev  float64 // a sliding window's: tokens counted in the window before
	end   int64   // a calendar window's: µs it ends
}

// roll moves a window state to the window holding now and returns that
// window's index, its start and end, and the instant to decide at. A
// window never moves backwards: when the store's clock has stepped back
// before the state's window (a failover to a replica whose clock is
// behind), the state stays in its window and the decision is made at that
// window's start, so a full window stays full and a sliding window weighs
// its previous one in full, until the clock is past it again.
//
// A calendar window (rules.Calendar) is indexed by its start in µs, not by
// floor(now/period), and keeps its end: the window's length is the
// calendar's, and a clock that stepped back finds it in the state.
// Calendar rules are strict, so they have no holders: what the lease paths
// compute from a holder's epoch and the period never meets them.
func (w *window) roll(r *rules.Rule, now int64) (epoch, start, end, at int64) {
	if r.IsCalendar() {
		start, end := r.Calendar.Window(now)
		if start > w.index {
			w.count, w.index, w.end = 0, start, end
		}
		return w.index, w.index, w.end, max(now, w.index)
	}
	p := periodUS(r)
	epoch = max(now/p, w.index)
	if w.index != epoch {
		if r.Algorithm == rules.SlidingWindow && w.index == epoch-1 {
			w.prev = w.count
		} else {
			w.prev = 0
		}
		w.count, w.index = 0, epoch
	}
	start = epoch * p
	return epoch, start, start + p, max(now, start)
}

// used is what counts against the limit at at, in the rolled window that
// starts at start: its count, and for a sliding window (the sliding window
// counter) the previous window's, weighted by how much of it the sliding
// window still covers.
func (w *window) used(r *rules.Rule, at, start int64) float64 {
	if r.Algorithm != rules.SlidingWindow {
		return w.count
	}
	p := float64(periodUS(r))
	weight := (p - float64(at-start)) / p
	return w.prev*weight + w.count
}

func (st *state) acquireWindow(r *rules.Rule, now, ttl int64, req *AcquireRequest) Lease {
	limit, p := float64(r.Limit), periodUS(r)
	epoch, start, end, at := st.window.roll(r, now)
	// What the holder was lent in an ended window is gone with it: it may
	// give back only what it was lent in this one.
	report := reportOf(req.Held, req.HeldKnown)
	credited, _ := st.giveBack(req.Node, now, ttl, req.ReturnedEpoch, req.Returned, report)
	st.window.credit(r, epoch, credited, req.ReturnedEpoch)
	held := report.bound(st.givable(req.Node, now, ttl, epoch))
	if req.ReturnedEpoch == epoch {
		held -= float64(credited)
	}
	prev, had := st.holders[req.Node]
	kept := prev.windowReserved(r, now, start)
	added := st.window.debit(r, st.capConsumed(r, req.Node, now, req.Consumed, req.ConsumedAge), req.ConsumedAge, at, start)
	if restarted(prev, had, req) {
		// What its fallback may have admitted in this window before it
		// restarted, the l/n kept back for it, nothing will report: the
		// window counts it spent (a node crashed after falling back in a
		// window of 20, back as new, was lent it again: 21).
		st.window.count += kept
	}
	st.window.settle(r, req.Settled)
	others, holders, told := st.hold(r, req.Node, req.Want, req.WantRate, now, ttl, held, epoch, req.FallbackNodes)
	used := st.window.used(r, at, start)
	// What the absent holders may admit on their fallback in this window is
	// not lent, nor what those back in it may still admit there while their
	// returns are on their way (core_absence.go).
	reserve := st.windowReserve(r, now, start)
	used += reserve
	avail := int64(math.Floor(math.Max(limit-used, 0)))
	g := fairGrant(avail, req.Want, others)
	// A holder the window kept its l/n back for, renewing from a lease (not
	// back from its fallback), is lent at least that l/n, as far as the
	// room allows: it was kept for this holder. Water-filled beside the
	// others' wants, it would get a share of the unreserved room only, and
	// a fleet renewing at a window's start would be lent a window's room
	// an eighth of the rest at a time (8 nodes 200 ms away: 15 tokens of a
	// window of 1,000 first, 0.87 of the ideal). Renewing is its request
	// next after the last the store applied (not restarted).
	if had && req.Seq > 0 && req.Seq == prev.seq+1 && req.Consumed <= 0 && !req.OnFallback {
		g = max(g, min(req.Want, int64(kept), avail))
	}
	st.window.count += float64(g)
	st.lent(req.Node, g)
	st.unmet(req.Node, req.Want-g)
	// Back from its fallback, it keeps the rest of its l/n in this window
	// until its next request: it admits on it until this answer arrives,
	// and pays for that from this grant first.
	st.markBack(r, req, prev, had, now, epoch, added)
	l := Lease{Granted: g, TTL: us(ttl), Holders: holders, FallbackNodes: told, Epoch: epoch}
	l.Remaining = int64(math.Floor(math.Max(limit-used-float64(g), 0)))
	// Tokens of a window die with it: spent in the next one, what the store
	// counted in this one would come on top of what it lends there (a
	// sliding window's two-second lease over one-second windows let its one
	// node admit 1,005 in a window of 1,000).
	l.TTL = us(min(ttl, end-at))
	if r.Algorithm == rules.FixedWindow {
		if g < req.Want && l.Remaining == 0 {
			l.RetryAfter = us(end - at)
		}
		st.expires = max(end+ttl, st.keptUntil(r))
		return l
	}
	if g < req.Want {
		l.RetryAfter = us(st.window.slidingRetry(r, at, start, min(req.Want-g, r.Limit), reserve))
	}
	st.expires = max(start+2*p+ttl, st.keptUntil(r))
	return l
}

// debit adds tokens admitted outside the allocator to a rolled window's
// count, up to twice the limit, when they began in it (at less
// their age is in the window, which starts at start): what began in a
// window that has ended is dropped with it. Charged to this window it
// would count twice against the fleet's limit, the ended window's
// admissions having been counted there, or reserved (core_absence.go).
// It returns what it added.
func (w *window) debit(r *rules.Rule, consumed int64, age time.Duration, at, start int64) float64 {
	if at-age.Microseconds() < start {
		return 0
	}
	before := w.count
	w.count = math.Min(w.count+float64(consumed), 2*float64(r.Limit))
	return w.count - before
}

// slidingRetry is how long until a sliding window admits cost more tokens,
// reserve being kept back in it for absent holders (as if counted: it
// lasts for every window of their absence).
func (w *window) slidingRetry(r *rules.Rule, now, start, cost int64, reserve float64) int64 {
	limit, p := float64(r.Limit), float64(periodUS(r))
	count := w.count + reserve
	room := limit - float64(cost) - count
	if room >= 0 {
		if w.prev <= room {
			return 0
		}
		// The previous window's weight must fall to room/prev.
		at := float64(start) + p*(1-room/w.prev)
		return max(0, ceilUS(at-float64(now)))
	}
	// Wait for this window to become the previous one and fade enough.
	at := float64(start) + p + p*(1-(limit-float64(cost))/count)
	return max(0, ceilUS(at-float64(now)))
}

// credit takes n tokens of the window of index from back out of a window
// state whose current index is epoch: only while that window still counts.
func (w *window) credit(r *rules.Rule, epoch, n, from int64) {
	switch from {
	case epoch:
		w.count = math.Max(w.count-float64(n), 0)
	case epoch - 1:
		if r.Algorithm == rules.SlidingWindow {
			w.prev = math.Max(w.prev-float64(n), 0)
		}
	}
}

func (st *state) checkWindow(r *rules.Rule, now, cost int64) Decision {
	limit, p := float64(r.Limit), periodUS(r)
	_, start, end, at := st.window.roll(r, now)
	used := st.window.used(r, at, start)
	// A check admits no more than a lease would lend.
	reserve := st.windowReserve(r, now, start)
	used += reserve
	d := Decision{Limit: r.Limit}
	if used+float64(cost) <= limit {
		st.window.count += float64(cost)
		used += float64(cost)
		d.Allowed = true
	}
	d.Remaining = int64(math.Floor(math.Max(limit-used, 0)))
	if r.Algorithm == rules.FixedWindow {
		if !d.Allowed {
			d.RetryAfter = us(end - at)
		}
		d.ResetAfter = us(end - at)
		st.expires = max(end+r.Lease.TTL.Microseconds(), st.keptUntil(r))
		return d
	}
	if !d.Allowed {
		d.RetryAfter = us(st.window.slidingRetry(r, at, start, cost, reserve))
	}
	switch {
	case st.window.count > 0:
		d.ResetAfter = us(start + 2*p - at)
	case st.window.prev > 0:
		d.ResetAfter = us(end - at)
	}
	st.expires = max(start+2*p+r.Lease.TTL.Microseconds(), st.keptUntil(r))
	return d
}

// restarted reports whether req comes from a holder the store knew (prev)
// under a sequence not next to its last applied one, and reports nothing:
// a node restarted under its name, which numbers its requests afresh
// (lease.nextSeq) and has forgotten what its fallback admitted before. A
// request the store never saw leaves a gap too, and is taken for a
// restart: a window then counts what it kept for the holder as spent,
// accuracy lost, never a bound. Requests without a sequence (nodes before
// the field) are never taken for one.
func restarted(prev holder, had bool, req *AcquireRequest) bool {
	return had && req.Seq > 0 && prev.seq > 0 && req.Seq != prev.seq+1 && req.Consumed <= 0 && !req.OnFallback
}
