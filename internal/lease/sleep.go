package lease

// A key with a share is visited every sweep, for its share to earn. A key
// that is its share's only holder, full, and asked nothing for two sweeps
// would earn nothing but overflow there: its share sleeps instead, out of
// the tick, so that a node holding a long tail of such keys (each touched
// now and then) sweeps only the ones in use. The share is still held: the
// pool keeps its flag (the node's limit when the allocator is away), its
// lease and its renewal. It wakes when the hot path next takes from the pool
// (its watermark is set above any level, so the first Take asks), when a
// Take is refused, or when the manager next handles the key (a renewal due,
// a grant, a deadline); waking, it earns what it would have earned meanwhile
// (accrue), which the cap turns into overflow given back, as in the tick.
//
// A key with other holders stays in the tick: it must give its share back
// within a few sweeps of going quiet (giveBack), which only the tick sees.

import "math"

// sleep puts the key's share to sleep if nothing would happen to it in the
// coming sweeps but overflow.
func (m *Manager) sleep(p *Pool, now mono) {
	o := &p.own
	if o.asleep || o.busy == nil || o.shareRate() <= 0 || p.Holders() > 1 ||
		o.inFlight != nil || o.unacked != nil || o.pending || o.givingBack ||
		!p.flags.is(flagQueued) || // (its renewal is queued: a waking Take asks for nothing else)
		now.Sub(o.lastActive) < 2*m.cfg.Sweep || p.tokens.Load() < o.busy.shareCap {
		return
	}
	o.asleep = true
	m.sharing.remove(p)
	p.low.Store(math.MaxInt64)
	p.flags.set(flagAsleep, true)
	m.arm(p, now) // its deadlines: the lease's end, the served time, the idle check
}

// wake brings a sleeping share back to the tick.
func (m *Manager) wake(p *Pool, now mono) {
	o := &p.own
	if !o.asleep {
		return
	}
	o.asleep = false
	p.flags.set(flagAsleep, false)
	p.low.Store(watermark(o.size))
	if p.tokens.Load() < 0 { // evicted meanwhile
		return
	}
	m.share(p, now)
}
