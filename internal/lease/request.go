package lease

import (
	"time"

	"github.com/allot-dev/allot/internal/mutate"
	"github.com/allot-dev/allot/internal/rules"
)

// A key's next request: what it asks for, the report it carries, and its
// sequence number.

// init gives a key its first lease size, the first time the Core sees it.
func (c *Core) init(k *KeyLease, now mono) {
	if k.est.lastSample != 0 {
		return
	}
	r := k.Rule()
	k.est.lastSample, k.est.lastActive = now, now
	// Before any rate is known, ask for this node's share of one refresh
	// interval: a hot new key needs it, a cold one returns it when idle.
	k.resize(r, r.Rate()*r.Lease.Refresh.Seconds()/float64(max(c.cfg.Nodes(), 1)))
}

// request builds the key's next request at now: the last one again if it
// failed and may yet be answered, else a new one.
func (k *KeyLease) request(e *env, now mono) *flight {
	k.req.askedAgain = false
	f := k.retry(now)
	if f != nil {
		// Sent again as it was, but for whether it leaves on the fallback:
		// a copy the store never saw is applied now, and the key may admit
		// on its fallback until this one's answer arrives.
		f.onFallback = f.onFallback || k.mayFallBack()
	} else {
		r := k.Rule()
		overflow, fullAt := k.takeOverflow()
		wantRate, perNodes := k.wantRate(e, r, now)
		f = &flight{want: k.wantTokens(), wantRate: wantRate, wantRateNodes: perNodes, demand: k.demandRate(e), sent: now,
			returned: overflow + k.unusedNow(), returnedEpoch: k.win.epoch.Load(), seq: k.nextSeq(e),
			onFallback: k.mayFallBack()}
		if !k.req.sent && !mutate.On(mutate.SizeByHistory) {
			// The first request asks for what is already waiting on it; a hot
			// key's lease then doubles until it keeps up (sample). (Asking
			// for the node's part of the burst instead, a cold node, which
			// divides by one, took a fixed window's whole minute on its
			// first request and left it to die unspent.)
			f.want = min(max(f.want, k.demand.Load()), r.Lease.Max)
		}
		f.consumed, f.age = k.takeConsumed(now)
		f.settled = k.debt.Swap(0)
		// How long it has held no more than it holds: since the last Turn
		// that learned it spent, or since its last request left; none when
		// a spending is still to be noted. Said before held is read: a
		// token taken between is one the request says it spent just now.
		if !k.is(bitSpent) && k.req.spentAt != 0 {
			f.heldFor = now.Sub(k.req.spentAt)
		}
		k.req.spentAt = now
		f.held = max(k.tokens.Load(), fullAt) + f.returned
		if below := k.heldBelow(); below > 0 {
			f.held += below
			f.heldFor = 0
		}
		if mutate.On(mutate.ReturnGrant) && k.req.sent {
			f.returned = k.est.size // (a node giving back what it spent; it says what it holds)
		}
	}
	if k.share != nil {
		k.share.pooled = 0 // (what the share puts in from now on, setShare weighs)
	}
	if k.phase == phaseSharing && f.wantRate == 0 && k.shareRate() > 0 {
		k.phase = phaseGivingBack
	}
	k.req.inFlight, k.req.sent = f, true
	return f
}

// heldLess notes that the Core took tokens out of the key at now (not a
// spending, which the hot path marks): it held more until then, which its
// next request's held_for says.
func (k *KeyLease) heldLess(now mono) {
	if now.After(k.req.spentAt) {
		k.req.spentAt = now
	}
}

// mayFallBack reports whether a request leaving now leaves on the
// fallback: the allocator is taken for down, or the key has an allowance,
// so it may admit on its fallback until the answer arrives, and the store
// keeps its reservation until its next request (store.AcquireRequest).
func (k *KeyLease) mayFallBack() bool { return k.table.c.Down() || k.fallback.Load() != nil }

// retry returns the key's last request if it failed and may still be
// answered again: the allocator keeps a holder's last answer for a TTL.
// Sent again as it was, with its first send time (the lease runs from
// then) and its sequence number, it is applied at most once. An older one
// is dropped and its consumption reported afresh: at worst debited twice,
// never lost.
func (k *KeyLease) retry(now mono) *flight {
	f := k.req.unacked
	k.req.unacked = nil
	if f == nil {
		return nil
	}
	if now.Sub(f.sent) < k.Rule().Lease.TTL/2 {
		return f
	}
	k.restoreConsumed(f)
	return nil
}

// nextSeq numbers a key's new request. A key starts at a random number
// below 2^31, so that a node restarted under the same name is not taken
// for a retry of its former self (one chance in two billion, within the
// holder's TTL), and the number stays short in the store.
func (k *KeyLease) nextSeq(e *env) uint64 {
	if k.req.seq == 0 {
		k.req.seq = 1 + e.rng.Uint64N(1<<31)
	}
	k.req.seq++
	return k.req.seq
}

// takeConsumed hands what the key admitted on fallback, and has not yet
// reported, to a report: the tokens and how long ago the first was
// admitted. A window rule's report is dated by its newest part: the store
// drops a report that began in a window that has ended, and one that
// joins what a closed allowance owes of an earlier window to what the
// open one admitted in this window must be counted here whole, not
// dropped whole (what it over-counts is the earlier window's, never lost).
func (k *KeyLease) takeConsumed(now mono) (int64, time.Duration) {
	n, age := k.req.owed, time.Duration(0)
	if n > 0 {
		age = max(now.Sub(k.req.owedSince), 0)
	}
	k.req.owed, k.req.owedSince = 0, 0
	if a := k.fallback.Load(); a != nil {
		an, aage := a.TakeConsumed(now.sinceOrigin())
		switch {
		case an <= 0:
		case n > 0 && k.Rule().Algorithm != rules.TokenBucket:
			age = min(age, aage)
		default:
			age = max(age, aage)
		}
		n += an
	}
	return n, age
}

// restoreConsumed puts back the report of a request that did not reach
// the allocator: into the key's allowance while it has one (which keeps of
// a window rule's only what its current window admitted), else as owed.
func (k *KeyLease) restoreConsumed(f *flight) {
	k.debt.Add(f.settled) // (a debt is not dated: it is paid whenever)
	f.settled = 0
	since := f.sent.Add(-f.age)
	if a := k.fallback.Load(); a != nil && f.consumed > 0 {
		a.RestoreConsumed(f.consumed, since.sinceOrigin())
		return
	}
	k.owe(f.consumed, since)
}

// owe records n fallback admissions, the first at since, for the next
// report.
func (k *KeyLease) owe(n int64, since mono) {
	if n <= 0 {
		return
	}
	if k.req.owed <= 0 || since.Before(k.req.owedSince) {
		k.req.owedSince = since
	}
	k.req.owed += n
}

// wantTokens is the tokens a request asks for: the lease size, but nothing
// for a key whose share keeps it above the watermark.
func (k *KeyLease) wantTokens() int64 {
	if k.shareRate() > 0 && k.tokens.Load() >= watermark(k.est.size) {
		return 0
	}
	return k.est.size
}

// lapse makes a quiet key that is its share's only holder leave instead of
// renewing its share, and reports whether it did. Quiet here is nothing
// asked of the key since its last request left and for two refresh
// intervals: a key touched once then costs its first Acquire and one
// Release, and a sparse key keeps its share between two of its requests.
// It leaves rather than letting its lease run out, so that the allocator
// does not take it for a holder cut off on its fallback (docs/bounds.md,
// rule 4) and keep its share for it. A key with other holders gives its
// share back instead (giveBack), so that they have it sooner.
func (c *Core) lapse(k *KeyLease, now mono) bool {
	if k.shareRate() <= 0 || k.phase == phaseGivingBack || k.req.inFlight != nil || k.req.unacked != nil || k.owes() || k.Holders() > 1 {
		return false
	}
	c.taken(k, k.sample(&c.env, now))
	if k.req.askedAgain || now.Sub(k.est.lastActive) < 2*k.Rule().Lease.Refresh || k.ownerBusy() {
		return false
	}
	k.lower(bitQueued)
	c.leaveSoon(k)
	return true
}

// renewAfter is how long after sending a request the node renews its share:
// about a refresh interval, but early enough that the renewal's round trip,
// with a quarter more for its jitter, ends before the lease does.
func (e *env) renewAfter(k *KeyLease) time.Duration {
	r := k.Rule()
	rtt := e.roundTrip()
	if 2*rtt > r.Lease.TTL {
		e.warnShortTTL(k, rtt)
	}
	d := time.Duration(float64(r.Lease.Refresh) * (1 - renewJitter*e.rng.Float64()))
	return max(min(d, e.latestRenewal(k)), 0)
}

// latestRenewal is how long after a request the next may leave and still
// be answered, with a quarter more than the round trip for its jitter and a
// sweep to spare, before the lease ends.
func (e *env) latestRenewal(k *KeyLease) time.Duration {
	return k.Rule().Lease.TTL - e.roundTrip()*5/4 - e.cfg.Sweep
}

// retryDelay paces a key without a rate share whose lease fell short,
// because the allocator had too few tokens or kept some for the key's other
// holders: it asks again after a refresh interval, or later if the
// allocator says tokens will take longer (within a TTL). Under contention
// the fleet then makes about one call per node and interval, and the tokens
// wait for it centrally; asking sooner would only take other holders'
// shares. But the wait stays under half the time the central bucket takes
// to fill, or tokens would spill over its capacity between calls and be
// lost. A sliding window's room grows all the time, as its previous
// window's weight falls, so a key short of it asks again every refresh,
// whatever the allocator says a whole lease would take. A jitter over the
// last quarter of the wait keeps nodes that starved together from asking
// together, in waves of one refresh interval, and a key asks at least every
// refresh while the allocator names no longer wait: how soon a change of
// its rule (an override) reaches it.
func (e *env) retryDelay(k *KeyLease, retryAfter time.Duration) time.Duration {
	r := k.Rule()
	refresh := r.Lease.Refresh
	if r.Algorithm != rules.TokenBucket {
		// A window's room is lent between the holders that ask: what the
		// allocator keeps for the others is theirs only if they ask again
		// before the window ends, so a window is asked of ten times.
		refresh = min(refresh, r.Period/10)
	}
	if r.Algorithm == rules.SlidingWindow {
		retryAfter = refresh
	}
	d := max(min(max(retryAfter, refresh), r.Lease.TTL, fillTime(r)/2), time.Millisecond)
	return time.Duration(float64(d) * (0.75 + 0.25*e.rng.Float64()))
}

// warnShortTTL logs, once per rule, that its leases end before a renewal
// can come back.
func (e *env) warnShortTTL(k *KeyLease, rtt time.Duration) {
	r := k.Rule()
	if _, seen := e.warned.LoadOrStore(r.Name, true); seen {
		return
	}
	e.cfg.Logger.Warn("allot: lease.ttl is shorter than two round trips to the allocator: leases end before their renewals arrive and the node refuses between them; raise lease.ttl",
		"rule", r.Name, "ttl", r.Lease.TTL, "round_trip", rtt, "suggested_ttl", (4 * rtt).Round(time.Millisecond))
}

// observeRoundTrip folds one Acquire's duration into the average.
func (e *env) observeRoundTrip(took time.Duration) {
	if e.rtt == 0 {
		e.rtt = took
		return
	}
	e.rtt += (took - e.rtt) / 8
}

// roundTrip is the round trip renewals plan for.
func (e *env) roundTrip() time.Duration {
	if e.cfg.RoundTrip != nil {
		return e.cfg.RoundTrip()
	}
	return e.rtt
}

// farOrUnknown reports whether the allocator's round trip is half the
// key's refresh interval or more, or not measured yet.
func (e *env) farOrUnknown(k *KeyLease) bool {
	rtt := e.roundTrip()
	return rtt <= 0 || 2*rtt >= k.Rule().Lease.Refresh
}
