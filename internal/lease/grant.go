package lease

import (
	"math"

	"github.com/allot-dev/allot/internal/mutate"

	"github.com/allot-dev/allot/internal/rules"
)

// grant is a key's transition on an answer to its request: the lease's
// tokens, its share and its end, the fallback allowance closed, and when
// the key asks again.
func (c *Core) grant(k *KeyLease, f *flight, g Grant, now mono) {
	k.req.inFlight, k.req.unacked, k.req.solo = nil, nil, false
	r := k.Rule()
	if !(g.Rate >= 0) { // NaN or negative: no share
		g.Rate = 0
	}
	g.Rate = min(g.Rate, r.Rate())
	k.holders.Store(int32(min(g.Holders, math.MaxInt32)))
	k.fallbackN.Store(int32(min(max(g.FallbackNodes, 0), math.MaxInt32)))
	k.win.freesAt.Store(0)
	if r := k.Rule(); r.Algorithm != rules.TokenBucket && g.Granted < f.want && g.Remaining == 0 && g.RetryAfter > 0 {
		// The window is spent: the store says when it frees the want (a
		// fixed window's end), from when it applied the request, which
		// the answer's arrival follows.
		k.win.freesAt.Store(int64(now.Add(g.RetryAfter)))
	}
	k.central.Store(max(g.Remaining, 0))
	c.sawHolders(g.Holders, now)
	k.req.short = g.Granted < f.want
	if k.served.Load() == 0 {
		// The key's first grant: the demand its first request asked for
		// waited on it, and decides again now; sampled as refused, it
		// doubled the key's lease and marked it starved (a key touched
		// once asked twice). It is demand now all the same: the key is not
		// quiet before its callers, woken, have decided again (a node's
		// workers on a key 200 ms away were not, and the key gave back at
		// once the share its first lease brought).
		if k.demand.Swap(0) > 0 {
			k.est.lastActive = now
		}
	}
	k.req.starved = false // (refusals before this grant say nothing of its share)
	// The tokens die when the lease may end at the store at the earliest,
	// the request's send time plus the TTL, on this node's monotonic clock,
	// and a sweep before that, as they are taken out at a visit. A lease
	// shorter than two sweeps (a window about to end) ends at half its TTL
	// instead, and the next sweep is brought forward to meet it. The key
	// stays served until the lease may end there at the latest, the answer
	// plus the TTL: only past that may it fall back (docs/bounds.md).
	margin := min(c.cfg.Sweep, g.TTL/2)
	expiry := f.sent.Add(g.TTL - margin)
	if margin < c.cfg.Sweep && expiry.Before(c.nextSweep) {
		c.nextSweep = expiry
	}
	k.served.Store(int64(now.Add(g.TTL)))
	if mutate.On(mutate.FallbackWhileServed) {
		k.served.Store(int64(f.sent.Add(g.TTL))) // (the old fault: served until the earliest end)
	}
	if r.Algorithm != rules.TokenBucket {
		k.win.epoch.Store(g.Epoch)
		k.win.unanswered.Store(0)
		c.learnWindows(r, f, g, now)
	}
	// What the fallback allowance admitted after this request left is paid
	// from the grant's tokens; the rest is owed to the next report.
	inFlight, since := k.closeFallback(now)
	c.accrue(k, now) // the old share, up to the answer
	k.setShare(f, g, now)
	k.settleSpans()
	if (g.Granted > 0 || g.Rate > 0) && expiry.After(now) {
		pay := min(inFlight, g.Granted)
		inFlight -= pay
		k.spans.put(g.Granted-pay, expiry)
		k.add(g.Granted - pay)
	}
	k.syncSpendBy()
	k.owe(inFlight, since)
	k.settleOwed(now)
	switch {
	case g.Rate > 0 && f.sent.Add(g.TTL).After(now):
		k.phase = phaseSharing
	default:
		k.phase = phaseLeased
	}
	c.scheduleNext(k, f, g, now)
}

// closeFallback closes the key's allowance, if it has one, and returns what
// it admitted that no report carries, and when the first of it was.
func (k *KeyLease) closeFallback(now mono) (int64, mono) {
	a := k.fallback.Swap(nil)
	if a == nil {
		return 0, 0
	}
	n, age := a.Close(now.sinceOrigin())
	if k.Rule().Algorithm != rules.TokenBucket {
		k.win.closed.Store(a)
	}
	return n, now.Add(-age)
}

// scheduleNext decides when the key asks again. A key with a rate share
// renews it about every refresh interval, so that shares follow demand,
// and early enough that the answer arrives before the lease ends; the
// renewal stays queued, so the hot path asks for nothing meanwhile. It asks
// sooner only when it fell short and the allocator expects free tokens
// before a TTL has passed, or when it was lent all it asked and the
// allocator had tokens left (refillsAhead): then it asks again when it runs
// low, as a key without a share does. A key without a share asks when it
// runs low, or, if it fell short, after retryDelay.
func (c *Core) scheduleNext(k *KeyLease, f *flight, g Grant, now mono) {
	r := k.Rule()
	if g.Rate > 0 {
		next := f.sent.Add(c.renewAfter(k))
		if g.Granted < f.want && g.RetryAfter < g.TTL {
			next = min(next, now.Add(min(max(g.RetryAfter, 2*c.cfg.Sweep), fillTime(r)/2)))
		}
		next = max(next, now)
		k.notBefore.Store(int64(next))
		c.delayed.push(k, next)
		if k.refillsAhead() {
			k.lower(bitQueued) // (the renewal stays due at next as well)
		}
		return
	}
	next := now
	if g.Granted < f.want {
		// Jittered, the wait may pass the lease's end; the next Acquire must
		// leave in time to keep the key served.
		next = max(min(now.Add(c.retryDelay(k, g.RetryAfter)), f.sent.Add(c.latestRenewal(k))), now)
	}
	k.notBefore.Store(int64(next))
	k.lower(bitQueued)
	if k.owes() || k.req.unused > 0 {
		k.WantRefill() // a report to make, or tokens to give back
	}
}
