package lease

import "time"

// Keys that leave: their tables, what they give back, and the node's close.

// leaveSoon marks a key to leave at the end of the Core's turn.
func (c *Core) leaveSoon(k *KeyLease) { c.leaving = append(c.leaving, k) }

// releaseGap is the least time between two Release calls of idle keys.
// Tokens given back later are conservative: nobody uses them meanwhile.
const releaseGap = 100 * time.Millisecond

// evict takes the keys that left in this turn out of their tables; what
// they held goes back with the next Release, which waits up to releaseGap
// for others (unless it is full): idle keys leave one by one, on their own
// deadlines, and would otherwise make a call each. A Take racing with the
// eviction fails on the sentinel and looks again.
func (c *Core) evict(now mono) {
	for _, k := range c.leaving {
		if ret, ok := c.leave(k); ok {
			c.returns = append(c.returns, ret)
		}
		if t := k.table; t.gone.Load() && t.Len() == 0 {
			c.drop(t)
		}
	}
	clear(c.leaving) // (the array would keep the keys that left alive)
	c.leaving = c.leaving[:0]
	if len(c.returns) == 0 || (len(c.returns) < c.cfg.MaxBatch && now.Before(c.lastRelease.Add(releaseGap))) {
		return
	}
	c.lastRelease = now
	for len(c.returns) > 0 {
		n := min(len(c.returns), c.cfg.MaxBatch)
		c.releases = append(c.releases, c.returns[:n:n])
		c.returns = c.returns[n:]
	}
	c.returns = nil
}

// leave takes k out of its table for good and says what to give back: the
// tokens of its lease and what its share earned beyond its cap. A key that
// may be the allocator's holder always says it leaves, tokens or not:
// otherwise the allocator takes it for a holder cut off on its fallback
// and keeps its part of the rule for it (docs/bounds.md, rule 4).
func (c *Core) leave(k *KeyLease) (Return, bool) {
	held := k.tokens.Swap(left)
	if held == left || k.phase == phaseLeft { // already gone
		return Return{}, false
	}
	k.phase = phaseLeft
	c.keys.Add(-1)
	c.sharing.remove(k)
	c.timers.cancel(k)
	c.delayed.cancel(k)
	k.table.keys.remove(k.key, k)
	k.lower(bitAsleep)
	overflow, fullAt := k.takeOverflow()
	tokens := overflow + k.unusedNow()
	still := fullAt
	if held > 0 && k.spans.k > 0 {
		tokens += held
		still = max(still-held, 0)
	}
	if k.share != nil {
		k.share.rate = 0
	}
	if !k.req.sent || k.table.gone.Load() {
		return Return{}, false
	}
	return Return{Rule: k.table.name, Key: k.key, Tokens: tokens, Epoch: k.win.epoch.Load(), Held: tokens + still}, true
}

// Final is what a closing node still owes the allocator: the requests that
// failed and may have been applied (sent again with their sequence
// numbers, to be applied once), reports of what keys admitted on fallback,
// and the returns of every key. Close builds it once the loop has stopped.
type Final struct {
	Retries, Reports []Request
	Returns          []Return
}

// Close empties every table into what the node owes the allocator, at now.
// The Core is done after it.
func (c *Core) Close(at time.Duration) Final {
	now := monoAt(at)
	var fin Final
	fin.Returns = append(fin.Returns, c.returns...) // keys that left, waiting for their call
	c.returns = nil
	for _, rel := range c.releases {
		fin.Returns = append(fin.Returns, rel...)
	}
	c.releases = nil
	for _, t := range c.tableList() {
		gone := t.gone.Load()
		for _, k := range t.sorted() {
			// The key leaves first, so that its retry and report say what
			// it holds: applied afresh with Held 0, a retry had the store
			// take the holder for empty, and the Return after it credited
			// nothing (24 tokens kept out of the bucket).
			f := k.req.unacked
			n, age := k.takeConsumed(now)
			c.expire(k, now)
			ret, ok := c.leave(k)
			if ok {
				fin.Returns = append(fin.Returns, ret)
			}
			if f != nil && !gone {
				fin.Retries = append(fin.Retries, Request{Rule: t.name, Key: k.key, Consumed: f.consumed, ConsumedAge: f.age, Seq: f.seq,
					Returned: f.returned, ReturnedEpoch: f.returnedEpoch, Held: ret.Held + f.returned, FallbackNodes: k.saysFallbackNodes()})
			}
			if n > 0 && !gone {
				fin.Reports = append(fin.Reports, Request{Rule: t.name, Key: k.key, Consumed: n, ConsumedAge: age, Held: ret.Held,
					FallbackNodes: k.saysFallbackNodes()})
			}
		}
	}
	return fin
}
