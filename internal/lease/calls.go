package lease

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/rules"
)

// The Core's requests: when a key's next request leaves, how requests share
// calls, and what an answer or a failure does.

// enqueue takes a refill the hot path asked for: it goes out with the next
// call, or when the key's retry time comes.
func (c *Core) enqueue(k *KeyLease, now mono) {
	if k.table.gone.Load() || k.phase == phaseLeft {
		k.lower(bitQueued)
		// A caller holding the old table can make a key after Forget; it
		// leaves now, or it would count against MaxKeys for good and its
		// decisions wait for ever.
		c.visit(k, now)
		return
	}
	c.init(k, now)
	c.noteFallback(k)
	c.arm(k, now)
	if at := mono(k.notBefore.Load()); at.After(now) && k.req.unused == 0 && !k.refillsAhead() {
		c.delayed.push(k, at)
		return
	}
	if !k.req.sent {
		// A key's first request has callers waiting on it (rule 1 of
		// docs/bounds.md): it leaves at once, with whatever else is ready.
		c.first++
		c.schedule(k, now)
		return
	}
	c.schedule(k, now.Add(c.cfg.BatchWindow))
}

// refillsAhead reports whether a key with a share asks for tokens when it
// runs low, before its renewal is due: its share is a trickle beside its
// demand (under half of it), its last grant lent all it asked and the
// allocator had tokens left. A hot fresh key then meets its callers from
// the centre's burst instead of running dry until a refusal hurries it (a
// key of burst 200 asked 1 ms apart, 1 ms away, refused 7 of its first
// 200). A key that fell short waits for its renewal: the centre has
// nothing more. A share that meets its demand waits too, and may sleep
// (sleep.go).
func (k *KeyLease) refillsAhead() bool {
	s := k.shareRate()
	return s > 0 && float64(max(k.est.rate, k.est.fast)) > 2*s && !k.req.short && k.central.Load() > 0
}

// hurry sends at once the request of a key that refused demand while its
// request waited for its share's renewal, when the allocator had tokens to
// spare at its last grant: a hot new key whose first share is its node's
// part of the rate would otherwise earn a token every share tick until its
// renewal (a fresh key of burst 200 asked 1 ms apart admitted 55 to 68 of
// its first 200). A key whose last grant fell short waits as it did: the
// centre has nothing more, and asking sooner would take other holders'
// shares.
func (c *Core) hurry(k *KeyLease, now mono) {
	if k.phase == phaseLeft || k.table.gone.Load() || k.req.inFlight != nil || k.req.short || k.q.pending {
		return
	}
	c.init(k, now)
	c.schedule(k, now.Add(c.cfg.BatchWindow))
}

// schedule adds k to the call that goes out at flushAt (at most at), once,
// and makes any delayed request of k stale.
func (c *Core) schedule(k *KeyLease, at mono) {
	k.q.delaySeq++
	if len(c.pending) == 0 || at.Before(c.flushAt) {
		c.flushAt = at
	}
	if !k.q.pending {
		k.q.pending = true
		c.pending = append(c.pending, k)
	}
}

// flush sends the pending requests that are due, at most MaxBatch a call.
func (c *Core) flush(now mono) {
	for {
		k, ok := c.delayed.popDue(now)
		if !ok {
			break
		}
		c.wake(k, now) // (a renewal due: its share earns up to now first)
		if c.lapse(k, now) {
			continue
		}
		c.schedule(k, now)
	}
	if len(c.pending) == 0 || now.Before(c.flushAt) {
		return
	}
	if c.down.Load() && now.Before(c.nextAttempt) {
		c.flushAt = c.nextAttempt
		return
	}
	if int(c.acquiring.Load()) >= c.cfg.MaxInFlight { // an answer wakes the Core
		return
	}
	// Calls are paced: while many keys ask (a long tail of keys each asking
	// once), they share fewer, fuller calls, which is what the store counts.
	// A first request is not paced: its callers wait on it, and
	// MaxInFlight still bounds the calls a flood of new keys makes.
	if next := c.lastCall.Add(c.cfg.CallGap); now.Before(next) && len(c.pending) < c.cfg.MaxBatch && c.first == 0 {
		c.flushAt = next
		return
	}
	c.lastCall = now
	c.first = 0
	rest := c.pending
	c.pending = nil
	var batch []*KeyLease
	for len(rest) > 0 && int(c.acquiring.Load()) < c.cfg.MaxInFlight {
		k := rest[0]
		rest = rest[1:]
		k.q.pending = false
		switch {
		case k.table.gone.Load() || k.phase == phaseLeft:
			k.lower(bitQueued)
		case k.req.inFlight != nil:
			// Its request is still on its way: the answer schedules the next.
		case k.req.solo: // in a call the allocator rejected: asks alone
			c.send([]*KeyLease{k}, now)
		default:
			if batch = append(batch, k); len(batch) == c.cfg.MaxBatch {
				c.send(batch, now)
				batch = nil
			}
		}
	}
	if len(batch) > 0 && int(c.acquiring.Load()) < c.cfg.MaxInFlight {
		c.send(batch, now)
		batch = nil
	}
	for _, k := range batch { // what did not fit waits for an answer to free a call
		k.q.pending = true
	}
	c.pending = append(append(c.pending, batch...), rest...)
	for _, k := range c.pending {
		if !k.req.sent {
			c.first++
		}
	}
	if len(c.pending) > 0 {
		c.flushAt = now
	}
}

// send builds one call of the keys' requests and hands it over.
func (c *Core) send(keys []*KeyLease, now mono) {
	reqs := make([]Request, len(keys))
	for i, k := range keys {
		if k.req.sent { // (a new key asks for its share of a refresh: init)
			c.taken(k, k.sample(&c.env, now))
		}
		f := k.request(&c.env, now)
		reqs[i] = Request{Rule: k.table.name, Key: k.key, Want: f.want, Consumed: f.consumed, ConsumedAge: f.age, Settled: f.settled,
			WantRate: f.wantRate, Returned: f.returned, ReturnedEpoch: f.returnedEpoch, Held: f.held, HeldFor: f.heldFor, Seq: f.seq,
			FallbackNodes: k.saysFallbackNodes(), OnFallback: f.onFallback, Demand: f.demand, WantRateNodes: f.wantRateNodes}
	}
	c.acquiring.Add(1)
	call := &Call{Requests: reqs, Timeout: max(c.cfg.RPCTimeout, 3*c.roundTrip()), keys: keys}
	for _, k := range keys {
		if k.Rule().Algorithm != rules.TokenBucket {
			k.win.unanswered.Store(int64(now.Add(call.Timeout)))
		}
	}
	c.calls = append(c.calls, call)
}

// Answer applies what one call brought back, at now: its answer, or the
// error it failed with, and how long it took.
func (c *Core) Answer(call *Call, ans Answer, err error, took, at time.Duration) {
	defer c.announce()
	now := monoAt(at)
	c.acquiring.Add(-1)
	if err == nil && len(ans.Grants) != len(call.keys) {
		err = errors.New("lease: allocator answered with the wrong number of leases")
	}
	if err != nil {
		c.failed(call, err, now)
		return
	}
	c.reached()
	c.backoff, c.refused = 0, 0
	c.observeRoundTrip(took)
	if ans.Nodes > 0 {
		c.fleet.Store(int32(min(ans.Nodes, 1<<30)))
	}
	for i, k := range call.keys {
		if k.phase == phaseLeft {
			// It left its table while its request was out (its rule went):
			// what the grant lent dies with its lease in the allocator.
			k.req.inFlight = nil
			continue
		}
		first := k.served.Load() == 0
		if f := k.req.inFlight; f != nil {
			c.grant(k, f, ans.Grants[i], now)
		}
		// A key's first grant is not sampled: the demand that waited on
		// it decides again now (AfterWait), and counted at the next sample
		// reads over the wait. Sampled between, the wait read as no demand
		// and what waited as a surge of all of it in an instant (a key of
		// 500/s, 200 ms from the allocator: 2,493/s, and a lease five times
		// what it could spend).
		c.settled(k, now, !first || k.served.Load() == 0)
	}
	if ans.Version != "" && ans.Version != c.version {
		c.version = ans.Version
		if h := c.cfg.Hooks.RulesVersion; h != nil {
			h(ans.Version)
		}
	}
}

// failed handles an Acquire that got no answer: the consumption it carried
// is kept for the next report; an outage backs off and retries the keys.
func (c *Core) failed(call *Call, err error, now mono) {
	var rej *Rejection
	isRej := errors.As(err, &rej)
	for i, k := range call.keys {
		f := k.req.inFlight
		if f == nil || k.phase == phaseLeft {
			k.req.inFlight = nil
			continue
		}
		if isRej && rej.Request == i {
			// Refused before it reached the store: nothing of it was applied.
			k.req.unacked = nil
			k.restoreConsumed(f)
		} else {
			// It may have been applied with its answer lost: the next request
			// is this one again, with its sequence number (see retry), and a
			// window key does not fall back in the window it may have been
			// applied in (unanswered, newAllowance).
			k.req.unacked = f
		}
		k.req.inFlight = nil
		if k.phase == phaseGivingBack {
			k.phase = phaseSharing
		}
	}
	defer func() {
		for _, k := range call.keys {
			if k.phase != phaseLeft {
				c.settled(k, now, true)
			}
		}
	}()
	if errors.Is(err, ErrRejected) {
		c.rejected(call, err, now)
		return
	}
	c.unreachable(err)
	if timedOut(err) {
		c.failures.Add(1)
	} else { // (refused: the allocator is not there)
		c.failures.Store(max(c.failures.Load(), 2))
	}
	c.backoff = min(max(time.Duration(float64(c.backoff)*1.6), c.cfg.BackoffBase), c.cfg.BackoffMax)
	jitter := 1 + 0.2*(2*c.rng.Float64()-1)
	c.nextAttempt = now.Add(time.Duration(float64(c.backoff) * jitter))
	c.downNews(c.nextAttempt, call.Timeout)
	for _, k := range call.keys {
		if c.stillWanted(k, now) {
			c.schedule(k, c.nextAttempt)
		}
	}
}

// stillWanted reports whether a key whose request failed should ask again:
// it has demand, or admitted tokens to report. One that asked once and went
// quiet drops its request, and with it the retries: a failed call of many
// keys each touched once must not be sent again and again until the
// allocator answers. A request that carried admitted tokens is sent again
// as it was (applied once); one that carried none is dropped, and what it
// may have been granted dies with its lease in the allocator.
func (c *Core) stillWanted(k *KeyLease, now mono) bool {
	if k.owes() || !k.quiet(&c.env, now) {
		return true
	}
	if f := k.req.unacked; f != nil {
		if f.consumed > 0 || f.settled > 0 {
			return true
		}
		k.req.unacked = nil
	}
	k.lower(bitQueued)
	return false
}

// rejected handles a call the allocator refused. When the refusal names
// one request (a key of a rule it no longer knows, say), that key waits a
// second and asks alone from then on, and the others ask again at once.
// When it names none, nothing in the call is wrong but the allocator cannot
// serve it (a store error that retrying will not cure, a refused
// identity): the whole call backs off, doubling up to maxRefusedBackoff,
// and comes back together once the allocator answers; splitting it into
// one call per key would multiply the load by the keys.
func (c *Core) rejected(call *Call, err error, now mono) {
	bad := -1
	var rej *Rejection
	if errors.As(err, &rej) && rej.Request >= 0 && rej.Request < len(call.keys) {
		bad = rej.Request
	}
	if bad < 0 && len(call.keys) > 1 && !errors.As(err, &rej) {
		bad = -2 // a refusal that says nothing: find the key by asking alone
	}
	switch {
	case bad >= 0:
		c.lastCall = 0 // long ago: the others ask again at once, unpaced
		for i, k := range call.keys {
			if i != bad {
				c.schedule(k, now)
			}
		}
		k := call.keys[bad]
		k.req.solo = true
		k.notBefore.Store(int64(now.Add(time.Second)))
		k.lower(bitQueued)
		c.cfg.Logger.Warn("allocator rejected a lease request", "rule", k.table.name, "err", err)
	case bad == -2:
		c.lastCall = 0
		for _, k := range call.keys {
			k.req.solo = true
			c.schedule(k, now)
		}
	default:
		// Refused as a whole, the node cannot be served: for its keys that
		// is an outage, and they fall back (failure: open) or deny.
		c.unreachable(err)
		c.failures.Store(max(c.failures.Load(), 2)) // (a refusal is no slow answer)
		c.refused = min(max(2*c.refused, 250*time.Millisecond), maxRefusedBackoff)
		at := now.Add(time.Duration(float64(c.refused) * (0.8 + 0.4*c.rng.Float64())))
		// No call leaves before the backoff ends, whatever asks meanwhile
		// (flush holds to nextAttempt while the allocator is down): a new
		// key's request 19 ms into a 250 ms backoff took the refused keys
		// with it, to be refused again, the set growing with every call.
		c.nextAttempt = at
		c.downNews(at, call.Timeout)
		for _, k := range call.keys {
			k.req.solo = false
			c.schedule(k, at)
		}
		c.cfg.Logger.Warn("allocator refused a lease call; backing off", "keys", len(call.keys), "backoff", c.refused, "err", err)
	}
}

// timedOut reports whether a call failed for want of an answer in time,
// which a slow allocator gives as well as a lost one (DownForNew).
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// maxRefusedBackoff bounds the wait between calls the allocator refuses
// as a whole: how late the keys return once it serves again.
const maxRefusedBackoff = 10 * time.Second

// reached notes a call the allocator answered: it is reachable.
func (c *Core) reached() {
	c.failures.Store(0)
	c.setReachable(true, nil)
}

// unreachable notes a call that failed with cause: the allocator is taken
// for down until one is answered.
func (c *Core) unreachable(cause error) { c.setReachable(false, cause) }

// downNews dates the failure just noted: news until a call made at next,
// the next attempt, would have failed too (by its deadline, timeout),
// with as much again for a loop that runs late.
func (c *Core) downNews(next mono, timeout time.Duration) {
	c.downUntil.Store(int64(next.Add(2 * timeout)))
}

func (c *Core) setReachable(up bool, cause error) {
	if c.down.Swap(!up) == up { // the state changed
		if h := c.cfg.Hooks.Reachable; h != nil {
			h(up, cause)
		}
	}
}
