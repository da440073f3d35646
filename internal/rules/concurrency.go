package rules

import "time"

// A concurrency rule limits the requests of a key in flight at once across
// the fleet: `limit` slots, taken when a request starts and given back when
// it ends. Nodes lease slots as they lease tokens (a node holding k admits
// up to k at once without the network). It has no period, no burst and no
// debt, and is never strict: a slot is a lease, not a per-request call.
//
// max_hold is the trade-off between a node cut off from the allocator and
// one that crashed, which the store cannot tell apart. The store keeps a
// node's slots for lease.ttl after its last renewal, then lends them again:
// that is how a crashed node's slots come back, within one TTL. A node
// stops taking slots on a lease max_hold before that lease ends, so each
// slot it took stays covered by the store's count for max_hold at least;
// a handler that runs longer than max_hold on a node that lost the
// allocator may run beside the slot's next holder. While the allocator
// answers, leases renew and a slot is held as long as its handler runs.

// Defaults and bounds of a concurrency rule's lease.
const (
	// defaultConcurrencyTTL: a crashed node's slots come back within it.
	defaultConcurrencyTTL = 2 * time.Second
	// maxHoldPerTTL: max_hold defaults to half the TTL, which leaves the
	// other half for renewals (refresh, a tenth of the TTL).
	maxHoldPerTTL = 2
)

// IsConcurrency reports whether r limits requests in flight.
func (r *Rule) IsConcurrency() bool { return r.Algorithm == Concurrency }

// LeaseLife is how long after a request is sent a node may take slots on
// the lease it answers: the TTL less max_hold (concurrency rules).
func (r *Rule) LeaseLife() time.Duration { return r.Lease.TTL - r.MaxHold }

func (r *Rule) normalizeConcurrency(bad func(string, string, ...any) error) error {
	const why = "a concurrency rule counts requests in flight, not tokens over time"
	switch {
	case r.Limit <= 0 || r.Limit > MaxLimit:
		return bad("limit", "must be between 1 and %d requests in flight, got %d", MaxLimit, r.Limit)
	case r.Period != 0 || !r.Calendar.IsZero():
		return bad("period", "%s: remove it (limit is how many may run at once)", why)
	case r.Calendar.Zone != "":
		return bad("time_zone", "%s: it has no period to align", why)
	case r.Burst != 0 && r.Burst != r.Limit:
		return bad("burst", "%s: remove it (limit is the whole capacity)", why)
	case r.MaxDebt != nil:
		return bad("max_debt", "%s: a slot is given back, never settled", why)
	case r.Strict:
		return bad("strict", "%s: its slots are leased, there is no per-request check", why)
	case r.Shadow:
		return bad("shadow", "is not supported on concurrency rules")
	case len(r.Overrides) > 0:
		return bad("overrides", "are not supported on concurrency rules")
	}
	r.Burst = r.Limit
	if r.Failure == 0 {
		r.Failure = FailOpen
	}
	if r.Failure != FailOpen && r.Failure != FailClosed {
		return bad("failure", "must be open or closed")
	}
	l := &r.Lease
	if l.TTL == 0 {
		l.TTL = defaultConcurrencyTTL
	}
	if l.TTL < minLeaseDuration || l.TTL > MaxLeaseTTL {
		return bad("lease.ttl", "must be between %v and %v, got %v", minLeaseDuration, MaxLeaseTTL, l.TTL)
	}
	if r.MaxHold == 0 {
		r.MaxHold = l.TTL / maxHoldPerTTL
	}
	if r.MaxHold < 0 || r.MaxHold >= l.TTL {
		return bad("max_hold", "must be positive and below lease.ttl (%v), got %v: a node stops taking slots on a lease max_hold before it ends", l.TTL, r.MaxHold)
	}
	if l.Refresh == 0 {
		l.Refresh = max(l.TTL/refreshPerTTL, minLeaseDuration)
	}
	if life := r.LeaseLife(); l.Refresh < minLeaseDuration || 2*l.Refresh > life {
		return bad("lease.refresh", "must be between %v and half of lease.ttl less max_hold (%v), got %v: a lease is renewed at least twice in its life", minLeaseDuration, life/2, l.Refresh)
	}
	if l.Min == 0 {
		l.Min = 1
	}
	if l.Max == 0 {
		l.Max = r.Limit
	}
	if l.Min < 0 || l.Min > r.Limit {
		return bad("lease.min", "must be between 1 and the limit %d, got %d", r.Limit, l.Min)
	}
	if l.Max < l.Min || l.Max > r.Limit {
		return bad("lease.max", "must be between lease.min (%d) and the limit %d, got %d: the most slots one node holds", l.Min, r.Limit, l.Max)
	}
	return nil
}
