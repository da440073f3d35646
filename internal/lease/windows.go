package lease

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
)

// Where the store's windows lie on this node's clock: a window rule's
// fallback counts its allowance per store window, and only where it is
// sure which window it is in (docs/bounds.md, rule 5). A window grant says
// it: the store applied the request at some instant a in [sent, answer] on
// the node's clock, in window Epoch, and a window's lease ends no later
// than its window does, exactly at it when the window's end is nearer than
// the TTL. So the store's clock reads mono + d with
//
//	Epoch·P - answer ≤ d ≤ (Epoch+1)·P - TTL - sent,
//
// and, for a lease its window's end cut short, d ≥ (Epoch+1)·P - TTL - answer.

// learnWindows narrows the estimate with one window grant.
func (c *Core) learnWindows(r *rules.Rule, f *flight, g Grant, now mono) {
	p := r.Period
	sent, answer := f.sent.sinceOrigin(), now.sinceOrigin()
	end := time.Duration(g.Epoch+1) * p
	lo, hi := time.Duration(g.Epoch)*p-answer, end-g.TTL-sent
	// (The store counts in whole microseconds: a TTL is cut short only
	// when it is short of the rule's in them.)
	if g.TTL < r.Lease.TTL.Truncate(time.Microsecond) {
		lo = max(lo, end-g.TTL-answer)
	}
	if lo > hi {
		return // (a store clock stepped between the answer's parts: say nothing)
	}
	w := fallback.Windows{Lo: lo, Hi: hi, Known: true}
	if old := c.windows.Load(); old != nil && lo <= old.Lo && old.Hi <= hi {
		// The new one holds the old: the old, narrower, stands. One that
		// only overlaps it is not narrowed by it: the store's clock may
		// have stepped since the old was learned, and where the two
		// overlap may then hold neither (a node 1 s away, its samples as
		// wide as a window, kept counting its fallback in windows the
		// step had moved). Only the new one is certain now.
		w.Lo, w.Hi = old.Lo, old.Hi
	}
	c.windows.Store(&w)
}

// Windows is where the store's windows lie, as far as this node knows;
// guess is the node's own offset (its wall clock less its monotonic one),
// used while it knows nothing: the first guess, kept, so that a step of
// the wall clock does not move the windows a fallback counts in (a node
// clock stepped 31 minutes let a sliding log's fallback count a third
// half-window in one period). Safe for concurrent use.
func (c *Core) Windows(guess time.Duration) fallback.Windows {
	if w := c.windows.Load(); w != nil {
		return *w
	}
	c.guess.CompareAndSwap(nil, &guess)
	g := *c.guess.Load()
	return fallback.Windows{Lo: g, Hi: g}
}

// windowHeadroom is how much more than its demand's estimate a window key
// may ask for what is left of its window: an estimate trails a rising
// demand, and a key short of tokens asks again a round trip later.
const windowHeadroom = 1.1

// windowWant caps a window key's want at what its demand could spend before
// the store's window ends: a window's tokens die with it, and arrive a
// round trip after their request leaves. A node asking for a lease's worth
// it could not spend took the room its neighbours would have spent (8 nodes
// 200 ms away, each busy at 500/s after a quiet window: the first to renew
// was lent 499 with 0.6 s of the window left, spent 240, and five of the
// eight were lent nothing). The window's end is reckoned at the latest the
// node's estimate of the store's clock allows (its Lo: the most time
// left), so the cap never asks less than the demand could spend. No cap
// while the windows are unknown, a calendar period's, or when the answer
// would arrive after the window ends (the request may then be the next
// window's); nor with no demand measured (a first request).
func (c *Core) windowWant(r *rules.Rule, want int64, demand float64, now mono) int64 {
	if r.Algorithm == rules.TokenBucket || r.IsCalendar() || r.Period <= 0 || demand <= 0 || want <= 1 {
		return want
	}
	w := c.windows.Load()
	if w == nil || !w.Known {
		return want
	}
	p := r.Period
	in := (now.sinceOrigin() + w.Lo) % p
	if in < 0 {
		in += p
	}
	spend := p - in - c.env.roundTrip()
	if spend <= 0 {
		return want
	}
	return min(want, max(int64(math.Ceil(windowHeadroom*demand*spend.Seconds())), 1))
}
