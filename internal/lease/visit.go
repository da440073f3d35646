package lease

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// A key's bookkeeping when the Core looks at it: at a deadline of its, in
// the sweep of shares, and after an answer.

// sweep runs every Sweep while some keys hold a share of a rate: their
// shares earn, their tokens expire, their rates are sampled, those gone
// quiet give their shares back to the key's other holders, and those idle
// with no other holder leave. No other key costs the sweep anything. (The
// set is walked from its end: a key that leaves it swaps in one already
// visited.)
func (c *Core) sweep(now mono) {
	for i := c.sharing.len() - 1; i >= 0; i-- {
		if i >= c.sharing.len() {
			continue
		}
		k := c.sharing.keys[i]
		c.accrue(k, now)
		c.expire(k, now)
		c.taken(k, k.sample(&c.env, now))
		c.giveBack(k, now)
		if k.Holders() <= 1 && k.idle(now) {
			// Its only holder, idle: it leaves, and the Release of what its
			// lease holds ends its share in the allocator too.
			c.leaveSoon(k)
			continue
		}
		if k.shareRate() <= 0 { // it ended: back to its own deadlines
			c.sharing.remove(k)
			c.arm(k, now)
			continue
		}
		c.sleep(k, now)
	}
}

// visit does a key's bookkeeping when one of its deadlines comes: tokens
// that die, the idle check. A key with nothing due is not visited.
func (c *Core) visit(k *KeyLease, now mono) {
	if k.phase == phaseLeft {
		return
	}
	c.init(k, now)
	c.accrue(k, now)
	c.expire(k, now)
	c.taken(k, k.sample(&c.env, now))
	if k.idle(now) {
		c.leaveSoon(k)
		return
	}
	c.noteFallback(k)
	if k.owes() {
		k.WantRefill()
	}
	c.arm(k, now)
}

// noteFallback moves a key whose decisions made a fallback allowance to
// the fallback phase.
func (c *Core) noteFallback(k *KeyLease) {
	if k.phase != phaseLeft && k.fallback.Load() != nil {
		c.sharing.remove(k)
		k.phase = phaseFallback
	}
}

// arm sets the key's next deadline: when its oldest tokens die, when it
// may be idle. A key holding a share is the sweep's.
func (c *Core) arm(k *KeyLease, now mono) {
	if c.sharing.has(k) || k.phase == phaseLeft {
		c.timers.cancel(k)
		k.q.timerAt = 0
		return
	}
	// A key is looked at at least every half idle period, so that demand
	// found at a look is dated within half a period of its use: it leaves
	// between one and one and a half idle periods after its last use. (Dated
	// half a period back at every look instead, a key used every 400 ms
	// with an idle period of 500 ms left 350 ms after a use.)
	next := min(k.est.lastActive.Add(k.idleAfter()), now.Add(k.idleAfter()/2))
	if k.phase == phaseDormant && k.Holders() > 1 { // its share goes back once it is quiet
		next = min(next, k.est.lastActive.Add(k.quietAfter(&c.env)))
	}
	if !next.After(now) { // busy (a request on its way): look again later
		next = now.Add(k.Rule().Lease.TTL / 2)
	}
	if s := mono(k.served.Load()); k.Rule().Algorithm != rules.TokenBucket && s.After(now) {
		next = min(next, s) // an idle window key leaves once its lease is over (idle)
	}
	if at, ok := k.spans.next(); ok {
		// Tokens die at their lease's end, also when the key is busy (its
		// idle deadline passed, a request on its way): put off by the busy
		// look, a lease of 20 ms lived on 2 s, into the next window (1,010
		// in a window of 1,000).
		next = min(next, max(at, now.Add(time.Microsecond)))
	}
	if k.q.timerAt.IsZero() || next.Before(k.q.timerAt) {
		k.q.timerAt = next
		c.timers.push(k, next)
	}
}

// settled follows a key whose request has been answered (or has failed):
// a key of a rule that went leaves; the others get their deadlines, and
// are sampled unless told not to (a first grant: Core.Answer).
func (c *Core) settled(k *KeyLease, now mono, sample bool) {
	if k.table.gone.Load() {
		c.visit(k, now)
		return
	}
	if sample {
		c.taken(k, k.sample(&c.env, now)) // a key that was not sampled meanwhile
	}
	c.share(k, now)
	c.arm(k, now)
}

// share notes that the key holds a share (or no longer does).
func (c *Core) share(k *KeyLease, now mono) {
	if k.shareRate() > 0 && k.phase != phaseDormant {
		if !c.sharing.has(k) {
			c.sharing.add(k)
			c.timers.cancel(k)
			k.q.timerAt = 0
			if c.sharing.len() == 1 && !c.nextSweep.After(now) { // (a short lease may have brought it forward)
				c.nextSweep = now.Add(c.cfg.Sweep)
			}
		}
		return
	}
	c.sharing.remove(k)
}

// taken reports lease admissions to the owner's metrics.
func (c *Core) taken(k *KeyLease, n int64) {
	if h := c.cfg.Hooks.Taken; h != nil && n > 0 {
		h(k.table.name, n)
	}
}

// expire takes out the tokens whose lease has ended.
func (c *Core) expire(k *KeyLease, now mono) {
	defer k.syncSpendBy()
	k.settleSpans()
	if k.spans.k == 0 {
		return
	}
	gone := k.spans.expire(now)
	newest := k.spans.k == 0
	if newest {
		gone = math.MaxInt64 // the last lease ended: nothing of it stays
	}
	if gone <= 0 {
		return
	}
	k.gen.Add(1)
	got := k.remove(gone)
	// A window's returns name the window: only the newest lease's tokens
	// are known to be of the window the key's epoch says.
	if got > 0 && !k.table.gone.Load() && (newest || k.Rule().Algorithm == rules.TokenBucket) {
		if k.req.unusedEpoch != k.win.epoch.Load() {
			k.req.unused = 0 // (of a window that has ended: credited nowhere)
		}
		k.req.unused += got
		k.req.unusedEpoch = k.win.epoch.Load()
		// They go at once, whatever the key's next request waited for: the
		// lease ends at the store about a sweep from now. A window key
		// with no demand since its idle period began leaves instead, its
		// Release carrying them: it stayed only while its lease might be
		// in force (idle), and renewing, it would stay for good.
		if k.Rule().Algorithm != rules.TokenBucket && now.Sub(k.est.lastActive) >= k.idleAfter() {
			return
		}
		k.raise(bitQueued)
		c.schedule(k, now)
	}
}

// giveBack sends at once the renewal of a share whose key has gone quiet
// while other nodes hold it: it asks for no rate, so the share goes back to
// them within a few sweeps instead of at the lease's end. So does a key
// whose owner says a demand that wants well under the share it holds (a
// region whose load moved to another): the rest goes back, not at its
// renewal.
func (c *Core) giveBack(k *KeyLease, now mono) {
	if k.shareRate() <= 0 || k.req.inFlight != nil || k.phase == phaseGivingBack {
		return
	}
	if !k.quiet(&c.env, now) && !k.ownerWantsLess() {
		return
	}
	if k.Holders() <= 1 { // nobody to give it to: it leaves once quiet long enough (lapse)
		return
	}
	c.schedule(k, now)
}

// ownerWantsLess reports whether the key's owner says a demand whose
// share is under ownerShrink of the share it holds.
func (k *KeyLease) ownerWantsLess() bool {
	d, ok := k.ownerDemand()
	return ok && ownerHeadroom*d < ownerShrink*k.shareRate()
}

// retryIn is how long until the key's next refill may leave.
func (k *KeyLease) retryIn(now mono) time.Duration {
	return max(mono(k.notBefore.Load()).Sub(now), 0)
}
