package store

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/mutate"
	"github.com/allot-dev/allot/internal/rules"
)

// The token bucket's part of the reference semantics (see core.go): the
// refill, what a lease says of the bucket's fullness, and its debits.

// bucket is a token bucket's state.
type bucket struct {
	tokens   float64 // tokens held: below 0, a debt (core_debt.go)
	refilled int64   // µs of the last refill
	// belowFor, when positive, is 1 + how many µs the bucket has been
	// below capacity, at most, since it was last full for a whole lease
	// TTL (or was missing); 0 when nothing is known. refill adds to it,
	// fullness starts it afresh and drops it once it reaches a TTL. (It is
	// p in the scripts' layout, which versions before it wrote as 0.) Two
	// cases make it say less than the truth, so that a lease claims the
	// bucket full for longer than it was: while allocators of an older
	// version share the Redis (a rolling upgrade), their scripts carry p
	// through their refills without adding to it; and a reload that
	// lengthens the rule's TTL reads a count made against the shorter one.
	// Both last a TTL at most, and at worst a node keeps what it kept
	// before this account (its share's rate over the flight). Kept as an
	// instant instead, p would take 9 bytes where it mostly takes 1.
	belowFor int64
}

// refill adds what the central bucket earned since the last refill: the
// rule's rate, less the shares of it lent to holders, each until its lease
// ended, and less the reservations of the absent holders and of those back
// from an absence, each from when its lease ended, or it came back, until
// its absence did (core_absence.go). Shares never sum above the rate, so
// without reservations the bucket only grows over the interval and
// capping it at the end is exact. Reservations may pass it
// with the shares, or alone (each is the rate over the count its holder
// was last told, and holders told of fewer reserve more): the bucket then
// earns nothing, never less. A clock that steps back earns nothing and
// does not move the stamp back.
//
// It returns how long the bucket has been full at now, in µs, as far as
// what it could not hold tells: the overflow at the part of the rate no
// share or reservation holds at now. Shares only end between two refills,
// so that part only grew over the interval, and the answer is never more
// than the truth. 0 when it is below capacity.
func (st *state) refill(r *rules.Rule, now int64) int64 { return st.refillAround(r, now, "", 0, -1) }

// refillAround is refill with node's held taken as own, what it has just
// said it holds: the ceiling is the freshest the store can know. But room
// its spending opened was not there before it spent: heldFor, when known
// (≥ 0, µs), is how long it has held no more than own, and before then it
// held up to what the store counted it to hold, so refill earned before
// then does not fill that room. (Refilled to the fresh report's ceiling, a
// bucket whose one holder had kept a lease of 4,633 of a burst of 5,000
// through a quiet second, then spent 4,266 of it in 0.2 s, lent them again
// at once: 10,550 in 0.7 s where b + 1.1·r + 2·n is 10,502.)
func (st *state) refillAround(r *rules.Rule, now int64, node string, own float64, heldFor int64) int64 {
	if now <= st.bucket.refilled {
		return 0
	}
	sum := st.bucket.tokens + math.Max(st.earned(r, st.bucket.refilled, now), 0)
	st.bucket.tokens = math.Min(st.ceiling(r, now, node, own), sum)
	if h, ok := st.holders[node]; ok && node != "" && heldFor >= 0 && h.present(now) && h.held > own {
		from := max(now-heldFor, st.bucket.refilled)
		st.bucket.tokens = math.Min(st.bucket.tokens, st.ceiling(r, now, node, h.held)+math.Max(st.earned(r, from, now), 0))
	}
	// Full is the bucket alone at its burst: under a ceiling its holders'
	// tokens make, what it could not hold may have been spent already (the
	// store learns it at their next requests), so a fallback admitted then
	// is not paid for by refill lost.
	full := int64(0)
	if over := sum - float64(r.Burst); over > 0 {
		full = now - st.bucket.refilled
		if free := ratePerUS(r) - st.withheldRate(r, now)/1e6; free > 0 {
			full = int64(math.Min(math.Floor(over/free), float64(full)))
		}
	}
	if st.bucket.belowFor > 0 {
		st.bucket.belowFor += now - st.bucket.refilled - full
	}
	st.bucket.refilled = now
	return full
}

// earned is what the bucket earns over [from, to], from ≥ its stamp: the
// rule's rate less the shares lent over it and the reservations held over
// it (refill).
func (st *state) earned(r *rules.Rule, from, to int64) float64 {
	var withheld []float64
	for _, h := range st.holders {
		if end := min(h.until, to); h.rate > 0 && end > from {
			withheld = append(withheld, h.rate*float64(end-from)/1e6)
		}
	}
	withheld = st.reserved(r, from, to, withheld)
	return float64(to-from)*ratePerUS(r) - sortedSum(withheld)
}

// ceiling is what the central bucket may hold at now: the burst, less what
// its present holders may still hold unspent of what it lent them, node's
// counted as own (when node is not ""). A lease's tokens are the bucket's
// whether spent or not: refilled past them, the bucket and a holder that
// had kept its tokens would together admit more than the burst within a
// second (docs/bounds.md, rule 6). What a holder spent it says at its next
// request, which raises the ceiling; an expired lease's tokens are dead.
// Whole tokens are counted: the fraction would make the ceiling hang on
// the clock's last digits. What a holder holds of its share's pool counts
// too, though the bucket never held it (it withheld that rate): rule 2's
// tenth of the rate has no room for it beside the burst, as the share's
// tokens reach the pool only at the sweep after they are earned (seed
// 2519 passed b + 1.1·r + 2·n by one when the pools were left out).
func (st *state) ceiling(r *rules.Rule, now int64, node string, own float64) float64 {
	if mutate.On(mutate.RefillPastHeld) {
		return float64(r.Burst)
	}
	held := []float64{math.Floor(own)}
	for n, h := range st.holders {
		if n != node && h.present(now) && h.held >= 1 {
			held = append(held, math.Floor(h.held))
		}
	}
	return math.Max(float64(r.Burst)-sortedSum(held), 0)
}

// fullness tells a holder's request how much of the rule's rate the bucket
// could not hold before the request arrived: it had been full for fullFor
// µs then (full, from refill), and for fullInTTL µs at least, in all, of
// the TTL before. While it was full, what a node's fallback allowance earned
// was refill the bucket lost, so the node may keep it; the rest of what the
// share admitted while the request was on its way the bucket earned too
// and lent to others, and the node owes it (lease.Manager.oweInFlight).
// Both are 0 when nothing is known. It also keeps belowFor.
func (b *bucket) fullness(full, ttl int64) (fullFor, fullInTTL int64) {
	switch {
	case full >= ttl:
		b.belowFor = 1
	case b.belowFor > 0 && b.belowFor-1 >= ttl:
		b.belowFor = 0
	}
	fullInTTL = full
	if b.belowFor > 0 {
		fullInTTL = max(fullInTTL, ttl-(b.belowFor-1))
	}
	return min(full, ttl), min(fullInTTL, ttl)
}

// withheldRate is the sum of the shares and the reservations active at
// now, in tokens per second: the part of the rate the bucket does not
// earn.
func (st *state) withheldRate(r *rules.Rule, now int64) float64 {
	a := absenceUS(r)
	var rates []float64
	for _, h := range st.holders {
		if h.rate > 0 && h.present(now) {
			rates = append(rates, h.rate)
		}
		if h.reserving(now, a) {
			rates = append(rates, h.reservedRate(r))
		}
	}
	return sortedSum(rates)
}

// refillWait is how long the central bucket takes to earn need tokens at
// the part of the rate no share or reservation holds; with all of it
// withheld, the shares end or are renewed within a TTL, so it says a TTL
// plus the time at the full rate.
func (st *state) refillWait(r *rules.Rule, now, ttl int64, need float64) int64 {
	if need <= 0 {
		return 0
	}
	wait := float64(ttl) + need/ratePerUS(r)
	if free := ratePerUS(r) - st.withheldRate(r, now)/1e6; free > 0 {
		wait = math.Min(wait, need/free)
	}
	return ceilUS(wait)
}

func (st *state) acquireBucket(r *rules.Rule, now, ttl int64, req *AcquireRequest) Lease {
	capacity := float64(r.Burst)
	// What the node says it holds is read first: the refill's ceiling
	// counts that, not what it held at its last request.
	credited, held := st.giveBack(req.Node, now, ttl, 0, req.Returned, reportOf(req.Held, req.HeldKnown))
	fullFor, fullInTTL := st.bucket.fullness(st.refillAround(r, now, req.Node, held, req.heldFor()), ttl)
	st.bucket.tokens = math.Min(st.ceiling(r, now, req.Node, held), st.bucket.tokens+float64(credited))
	// A holder back from an absence had its fallback reserved: what it
	// admitted there up to the reservation the bucket never earned. So did
	// one back since, at its next request, for what it admitted while its
	// return was on its way.
	cover := st.cover(r, req.Node, now)
	prev, had := st.holders[req.Node]
	debit := math.Max(float64(st.capConsumed(r, req.Node, now, req.Consumed, req.ConsumedAge))-cover, 0)
	if mutate.On(mutate.ForgiveLate) { // what refilling since would have repaid is forgiven
		floor := math.Min(st.bucket.tokens, -math.Max(capacity-float64(req.ConsumedAge.Microseconds())*ratePerUS(r), 0))
		debit = math.Min(debit, math.Max(st.bucket.tokens-floor, 0))
	}
	st.bucket.debit(debit)
	st.bucket.settle(r, req.Settled)
	others, holders, told := st.hold(r, req.Node, req.Want, req.WantRate, now, ttl, held, 0, req.FallbackNodes)
	g := fairGrant(int64(math.Floor(math.Max(st.bucket.tokens, 0))), req.Want, others)
	st.bucket.tokens -= float64(g)
	st.lent(req.Node, g)
	l := Lease{Granted: g, TTL: us(ttl), Holders: holders, FallbackNodes: told, Rate: st.lendRate(r, req.Node, now),
		FullFor: us(fullFor), FullInTTL: us(fullInTTL)}
	// Back from its fallback, it keeps its reservation until its next
	// request: it admits on it until this answer arrives.
	st.markBack(r, req, prev, had, now, 0, 0)
	l.Remaining = int64(math.Floor(math.Max(st.bucket.tokens, 0)))
	if g < req.Want {
		need := math.Min(float64(req.Want-g), capacity)
		if st.bucket.tokens < need {
			l.RetryAfter = us(st.refillWait(r, now, ttl, need-st.bucket.tokens))
		}
	}
	st.expires = st.bucketExpiry(r, now, ttl)
	return l
}

// heldFor is HeldFor in µs, -1 when the node did not say; a claim beyond
// an hour is taken as an hour (the refill looks no further back than its
// last refill anyway).
func (req *AcquireRequest) heldFor() int64 {
	if !req.HeldForKnown {
		return -1
	}
	return min(max(req.HeldFor.Microseconds(), 0), int64(time.Hour/time.Microsecond))
}

// bucketExpiry is when a bucket's state is full again, and so means no
// more than a missing one, at the latest: every share ends within a TTL,
// and every reservation when its holder's absence does; from then on the
// bucket refills at the full rate. Its holders are kept as long.
func (st *state) bucketExpiry(r *rules.Rule, now, ttl int64) int64 {
	return max(now, st.keptUntil(r)) + ceilUS((float64(r.Burst)-st.bucket.tokens)/ratePerUS(r)) + ttl
}

// debit takes tokens admitted outside the allocator out of a refilled
// bucket, in full: a debt is repaid by refill, never forgiven, however long
// ago the tokens were admitted. What a report may debit is bounded before
// (capConsumed), which is what bounds the debt.
func (b *bucket) debit(n float64) { b.tokens -= n }

func (st *state) checkBucket(r *rules.Rule, now, cost int64) Decision {
	capacity := float64(r.Burst)
	st.refill(r, now)
	d := Decision{Limit: r.Limit}
	if st.bucket.tokens >= float64(cost) {
		st.bucket.tokens -= float64(cost)
		d.Allowed = true
	} else {
		d.RetryAfter = us(st.refillWait(r, now, r.Lease.TTL.Microseconds(), float64(cost)-st.bucket.tokens))
	}
	d.Remaining = int64(math.Floor(math.Max(st.bucket.tokens, 0)))
	d.ResetAfter = us(st.refillWait(r, now, r.Lease.TTL.Microseconds(), capacity-st.bucket.tokens))
	st.expires = st.bucketExpiry(r, now, r.Lease.TTL.Microseconds())
	return d
}
