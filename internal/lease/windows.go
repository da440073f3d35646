package lease

import (
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
