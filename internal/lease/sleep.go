package lease

// A key with a share is visited every sweep, for its share to earn. A key
// whose tokens are at its share's cap, with its renewal queued, and that was
// asked nothing for two sweeps would earn nothing but overflow there: its
// share sleeps instead (phaseDormant), out of the sweep, so that a node
// holding a long tail of such keys sweeps only the ones in use. The share
// is still held: its lease and its renewal go on. It wakes when the hot
// path next takes from the key (its watermark is set above any level, so
// the first Take asks), when a Take is refused, or when the Core next
// handles the key (a renewal due, a grant, a deadline); waking, it earns
// what it would have earned meanwhile (accrue), which the cap turns into
// overflow given back, as in the sweep.
//
// A key with other holders must give its share back once it is quiet
// (giveBack), for them to have it: its sleep ends then (arm sets the
// deadline), and the sweep that follows gives it back.

import "math"

// sleep puts the key's share to sleep if nothing would happen to it in the
// coming sweeps but overflow.
func (c *Core) sleep(k *KeyLease, now mono) {
	if k.phase != phaseSharing && k.phase != phaseGivingBack || k.share == nil || k.shareRate() <= 0 {
		return
	}
	// A key giving its share back sleeps until the answer (grant wakes it):
	// under a flood of keys touched once, their give-backs wait for calls.
	if k.phase != phaseGivingBack && ((k.Holders() > 1 && (k.quiet(&c.env, now) || k.ownerWantsLess())) || // (its giveBack is due)
		k.req.inFlight != nil || k.req.unacked != nil || k.q.pending ||
		!k.is(bitQueued) || // (its renewal is queued: a waking Take asks for nothing else)
		now.Sub(k.est.lastActive) < 2*c.cfg.Sweep || k.tokens.Load() < k.share.capTokens) {
		return
	}
	c.sharing.remove(k)
	if k.phase == phaseGivingBack { // the answer brings it back (settled)
		return
	}
	k.phase = phaseDormant
	k.low.Store(math.MaxInt64)
	k.raise(bitAsleep)
	c.arm(k, now) // its deadlines: the lease's end, the idle check
}

// wake brings a sleeping share back to the sweep.
func (c *Core) wake(k *KeyLease, now mono) {
	if k.phase != phaseDormant {
		return
	}
	k.lower(bitAsleep)
	k.phase = phaseSharing
	k.low.Store(watermark(k.est.size))
	c.share(k, now)
}
