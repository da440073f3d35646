package lease

// A key with a share is visited every sweep, for its share to earn. A key
// whose pool is full, with its renewal queued, and that was asked nothing
// for two sweeps would earn nothing but overflow there: its share sleeps
// instead, out of the tick, so that a node holding a long tail of such keys
// (each touched now and then) sweeps only the ones in use. The share is
// still held: the pool keeps its flag (the node's limit when the allocator
// is away), its lease and its renewal. It wakes when the hot path next takes from the pool
// (its watermark is set above any level, so the first Take asks), when a
// Take is refused, or when the manager next handles the key (a renewal due,
// a grant, a deadline); waking, it earns what it would have earned meanwhile
// (accrue), which the cap turns into overflow given back, as in the tick.
//
// A key with other holders must give its share back once it is quiet
// (giveBack), for them to have it: its sleep ends then (arm sets the
// deadline), and the tick that follows gives it back. Before, such keys
// stayed in the tick until quiet, up to half a TTL of sweeps: a flood of
// keys touched once on every node cost 26 µs a key on the nodes (the
// bench's keys scenario), a third of it the tick's visits.

import "math"

// sleep puts the key's share to sleep if nothing would happen to it in the
// coming sweeps but overflow.
func (m *Manager) sleep(p *Pool, now mono) {
	o := &p.own
	if o.asleep || o.busy == nil || o.shareRate() <= 0 {
		return
	}
	// A key giving its share back sleeps until the answer (grant wakes it):
	// under a flood of keys touched once, their give-backs wait for calls,
	// and were visited every sweep meanwhile (29 visits a key).
	if !o.givingBack && ((p.Holders() > 1 && m.quiet(p, p.Rule(), now)) || // (its giveBack is due)
		o.inFlight != nil || o.unacked != nil || o.pending ||
		!p.flags.is(flagQueued) || // (its renewal is queued: a waking Take asks for nothing else)
		now.Sub(o.lastActive) < 2*m.cfg.Sweep || p.tokens.Load() < o.busy.shareCap) {
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
