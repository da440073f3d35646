package lease

import (
	"github.com/allot-dev/allot/internal/mutate"
	"math"

	"github.com/allot-dev/allot/internal/rules"
)

// A lease on a token bucket carries a share of the rule's rate: the key
// earns it locally, in the sweep, from the answer until the request's send
// time plus the TTL, while the allocator's bucket stops earning it. So a
// node keeps its part of the rate however long its round trip, where tokens
// alone could only move what the central bucket held at the moment of each
// call (at most its burst per round trip).

const (
	// shareHeadroom is how much more than its measured demand a node asks
	// for: demand is noisy, and what a share earns beyond the key's cap is
	// given back, not lost.
	shareHeadroom = 1.25
	// ownerHeadroom is shareHeadroom for a key whose owner says its demand
	// (SetDemand): a sum of its nodes' estimates, steadier than one's, and
	// what its share earns beyond that demand dies at its owner (a
	// region's nodes hold what it lends them, so the parent's bucket has
	// no room for what the region gives back).
	ownerHeadroom = 1.1
	// ownerShrink is how far under its share such a key's demand falls
	// before it renews at once to give the rest back (Core.giveBack).
	ownerShrink = 0.7
	// renewJitter spreads renewals over [1, 1+renewJitter] refresh
	// intervals, so that nodes do not renew in step.
	renewJitter = 0.2
	// shareGive is the least part of its share a busy key asks for again.
	shareGive = 0.9
	// busyAtFirst is the demand a new key must show before its first
	// request leaves to ask for a share at once when the allocator is near.
	busyAtFirst = 2
)

// accrue moves what the key's share earned since the last accrual into its
// tokens, in whole tokens, up to the share's cap; what the cap refuses, or
// what arrives when no lease holds the key, is given back with the next
// Acquire. The share ends at its lease's end.
func (c *Core) accrue(k *KeyLease, now mono) {
	c.wake(k, now)
	s := k.share
	if s == nil {
		return
	}
	if s.rate > 0 {
		end := min(now, s.end)
		if end.After(s.from) {
			s.accrued += s.rate * end.Sub(s.from).Seconds()
			s.from = end
			// What is not yet a whole token carries over to the next lease,
			// but no more than a TTL of the share: a token is made of rate
			// lent within a TTL of its spending (docs/bounds.md, rule 2), not
			// pooled from leases long ended (ten nodes lent 0.5/s each, a
			// token per two TTLs, made their first tokens together).
			s.accrued = min(s.accrued, s.rate*k.Rule().Lease.TTL.Seconds())
		}
		if !now.Before(s.end) {
			s.rate = 0
			if k.phase.sharing() {
				k.phase = phaseLeased
			}
		}
	}
	if s.accrued < 1 {
		return
	}
	// More than the cap and the rule's capacity would only be given back
	// and capped there: a huge rate must not overflow the count.
	capacity := k.Rule().Capacity()
	whole := math.Floor(s.accrued)
	s.accrued -= whole
	n := int64(min(whole, float64(capacity+s.capTokens)))
	defer func() { s.overflow = min(s.overflow, capacity) }()
	held := k.tokens.Load()
	if held < 0 || k.spans.k == 0 || !now.Before(k.spans.end()) { // gone, or no lease to hold them
		s.overflow += n
		return
	}
	in := min(n, max(s.capTokens-held, 0))
	if in > 0 && k.spans.grow(in) {
		k.add(in)
	} else {
		in = 0
	}
	s.pooled += in
	if n > in {
		s.overflow += n - in
		s.fullAt = max(s.fullAt, held+in)
	}
}

// setShare starts the share a grant brought. While the request was on its
// way the key went on earning the old share, but the allocator counted the
// new one from the moment it answered: if the new share is smaller, the
// difference over the round trip was earned twice. What of it the key put
// in its tokens it may have admitted: that is owed, and taken back from
// its tokens or from what the share earns next. What of it overflowed was
// admitted by nobody, and is dropped rather than given back (given back,
// the allocator would lend it again). Charged in full, as a debt, the
// difference had a 1000/s share cut to 125/s after a 1 s round trip owe
// 875 tokens that had mostly overflowed: seven seconds of its node's share.
func (k *KeyLease) setShare(f *flight, g Grant, now mono) {
	s := k.share
	if s == nil {
		if g.Rate <= 0 { // no share before, none now: nothing starts or is owed
			return
		}
		s = &rateShare{}
		k.share = s
	}
	if s.rate > g.Rate {
		if overlap := min(now, s.end).Sub(f.sent); overlap > 0 {
			twice := (s.rate - g.Rate) * overlap.Seconds()
			owed := min(twice, float64(s.pooled))
			dropped := min(int64(math.Floor(twice-owed)), s.overflow)
			if mutate.On(mutate.OweWholeOverlap) {
				owed, dropped = twice, 0
			}
			s.accrued -= owed + min(twice-owed-float64(dropped), 1)
			s.overflow -= dropped
		}
	}
	// What the old share piled up beyond the new one's pool and the rule's
	// burst goes back with the next request: the burst's tokens the
	// ceiling counts (store.state.ceiling), but past it a pool is the tenth
	// of the rate the bound allows the shares (docs/bounds.md, rule 2), and
	// the holders the rate went to fill theirs anew. (Kept, a node that
	// gave back a share of 5,000/s on a burst of 50 held its pool of 500
	// while two others filled pools of 250 each: 5,568 in a second where
	// b + 1.1·r + 2·n is 5,556.)
	if pool := rules.SharePool(g.Rate); s.rate > g.Rate && s.capTokens > pool {
		owed := int64(math.Ceil(max(-s.accrued, 0)))
		keep := max(pool, k.Rule().Capacity())
		if past := min(s.capTokens-pool, k.tokens.Load()-owed-keep); past > 0 {
			moved := k.remove(past)
			s.overflow += moved
			s.fullAt = max(s.fullAt-moved, 0)
			k.heldLess(now)
		}
	}
	s.rate, s.from, s.end = g.Rate, now, f.sent.Add(g.TTL)
	if g.Rate > 0 {
		s.capTokens = rules.SharePool(g.Rate) // what a share may pile up in an idle key
	}
}

// settleOwed pays what the key owes its share out of the tokens it holds,
// at now.
func (k *KeyLease) settleOwed(now mono) {
	if s := k.share; s != nil && s.accrued < 0 {
		if paid := k.remove(int64(math.Ceil(-s.accrued))); paid > 0 {
			s.accrued += float64(paid)
			k.heldLess(now)
		}
	}
}

// wantRate is the share of the rule's rate a request asks for: the node's
// demand with some headroom, nothing once the key has gone quiet (that is
// how a share is given back). A new key asks for the node's part of the
// rule's rate at once if it was busy before its first request left, or if
// the allocator is far (a round trip of half a refresh or more) or not yet
// measured: a hot new key far away cannot wait a round trip more for it.
// Near, a key asks for its share with a later request, once its demand
// shows it needs one (tokensSuffice): the long tail of keys touched now
// and then does better on tokens alone. A part of the rule's rate asked
// for rather than measured says what it divided by (nodes, 0 otherwise),
// for an allocator that counts more live nodes to divide by its count
// (Request.WantRateNodes).
func (k *KeyLease) wantRate(e *env, r *rules.Rule, now mono) (rate float64, nodes int) {
	if e.cfg.TokensOnly || r.Algorithm != rules.TokenBucket {
		return 0, 0
	}
	if d, ok := k.ownerDemand(); ok {
		// Its owner's nodes measured their callers: no pattern of requests
		// to read through (SetDemand).
		return min(ownerHeadroom*d, r.Rate()), 0
	}
	switch {
	case !k.req.sent && (k.demand.Load() >= busyAtFirst || e.farOrUnknown(k)):
		n := max(e.cfg.Nodes(), 1)
		return r.Rate() / float64(n), n
	case !k.req.sent, k.quiet(e, now), k.tokensSuffice(e, r):
		return 0, 0
	}
	// The fast estimate leads when demand surges (load moving onto this
	// node), but only once it rests on a few requests: a slow key's fast
	// estimate swings between nothing and several times its rate.
	rate, fast := float64(k.est.rate), float64(k.est.fast)
	if fast > 2*rate && e.fewRequests(fast) {
		rate = fast
	}
	// A key's estimate swings by chance (a Poisson flow's EWMA by half at
	// a few requests a second), and every change of a share costs its node
	// up to the change over a round trip (setShare): eight nodes of a 20/s
	// rule, changing at every renewal, paid a tenth of the rule for it. So
	// a key that refused since its last request wants at least the share it
	// has, and one that did not lets it go by a tenth a renewal at most; a
	// quiet key gives it back whole (above).
	want := max(shareHeadroom*rate, shareGive*k.shareRate())
	if k.req.starved {
		want = max(want, shareHeadroom*k.shareRate())
	}
	return min(want, r.Rate()), 0
}

// tokensSuffice reports whether leases of tokens serve the key as well as
// a share would, so that it asks for none (and gives back the one it has):
// the allocator is near, the key's last grant was whole, and the key's
// demand over the fleet (this node's, times its holders or the fleet's
// size, whichever is larger) is under the rule's rate, so its central
// bucket does not run dry and each refill comes back whole within a round
// trip. A grant that fell short keeps the share: a hot key's rate estimate
// still climbs after its first lease (an average over the rate window).
func (k *KeyLease) tokensSuffice(e *env, r *rules.Rule) bool {
	return !k.req.short && !e.farOrUnknown(k) && float64(k.est.rate)*float64(max(k.Holders(), e.cfg.Nodes(), 1)) < r.Rate()
}
