package region

import (
	"time"

	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
)

// A region cut off from its parent, once its lease on a global key has
// nothing live, lends the key out of the lease's fallback allowance, as a
// node cut off from its allocator admits out of its own (docs/bounds.md,
// rule 4, and "Regions"): the rule over the regions, b/R then r/R, where R
// is what the parent told the region to divide by for the key, or the
// count of regions it knows, if more (fallbackRegions). The parent
// reserves that much for the region while it is absent, and the region's
// lease reports what the allowance admitted with its next request, which
// the parent debits beyond the reservation. A key the region held a lease
// on earns its allowance from the lease's end (lease.KeyLease.Decide), so
// a cut-off region spends the same rate/R whether its lease is young or
// old.
//
// The allowance counts a grant spent when it is lent; the node spends it
// within the grant's TTL, which is the rule's refresh (at most its TTL):
// what the region's fallback admits in a window of T is spent within
// T + refresh, inside the bound's T + ttl.

// fallbackTTL is how long a node may hold what the region lent it out of
// its fallback allowance: until its next renewal.
func fallbackTTL(r *rules.Rule) time.Duration { return min(r.Lease.Refresh, r.Lease.TTL) }

// fallback answers a node's request for want tokens of a key whose lease
// holds nothing that lives long enough to lend: out of the lease's
// fallback allowance when the parent is taken for down (KeyLease.Decide
// decides that, as on a node), else nothing. Either way the refusal of
// what it does not lend is counted in the key's demand.
func (s *Store) fallback(r *rules.Rule, k *lease.KeyLease, want int64) (got int64, ttl time.Duration) {
	if !s.mayFallBack(k) {
		k.Refused(want)
		return 0, 0
	}
	n, attempt := want, lease.FirstAttempt
	for range 2 {
		v := s.decide(k, n, attempt)
		switch {
		case v.Allowed && !v.Fallback:
			// A grant from the parent came meanwhile, and Decide spent of
			// it: lent as the lease's tokens are.
			return n, min(r.Lease.TTL, k.LiveFor(s.clk.Mono()))
		case v.Allowed:
			return n, fallbackTTL(r)
		case !v.Fallback || v.Remaining <= 0 || v.Remaining >= n:
			// The parent answers (or will), and the lease decides; or the
			// allowance has nothing. Decide counted the refusal.
			return 0, 0
		}
		// Less is left than the node asked for: lend what is.
		n, attempt = v.Remaining, lease.AfterWait
	}
	return 0, 0
}

// mayFallBack says whether the key's fallback allowance may decide, its
// lease having nothing live: no when it holds tokens that live 5 ms or
// less (they die before a node could spend them, and the allowance
// decides once they have); when the parent refuses the region's
// credentials (it is not down: the region is misconfigured, and its part
// of the rule was never reserved at the parent); and when nothing says
// how many regions share the rule (the parent told the region nothing of
// the key, nor of any other region, nor did Config.Regions: the rule over
// one region would be the whole rule, beside what the parent lends the
// others).
func (s *Store) mayFallBack(k *lease.KeyLease) bool {
	return k.Tokens() == 0 && !s.refused.Load() && (k.FallbackNodes() > 0 || s.fallbackRegions() > 0)
}

// decide decides n tokens of a key with no live tokens as a node decides
// one (its fallback allowance when the parent is down), and counts what
// the allowance lends.
func (s *Store) decide(k *lease.KeyLease, n int64, attempt lease.Attempt) lease.Verdict {
	v := k.Decide(n, s.clk.Mono(), s.clk.Now(), max(s.fallbackRegions(), 1), attempt)
	if v.Allowed && v.Fallback {
		s.fellBack.Add(n)
	}
	return v
}

// fallbackRegions is what a cut-off region divides a global rule by for
// a key the parent told it nothing of: the regions it was told of
// (Config.Regions) or the most the parent has told it to divide any key
// by, whichever is more; 0 when neither says.
func (s *Store) fallbackRegions() int {
	return int(max(s.regions, s.seenRegions.Load()))
}

// sawRegions keeps the most regions the parent has told the region to
// divide a key's fallback by.
func (s *Store) sawRegions(n int) {
	for {
		seen := s.seenRegions.Load()
		if int64(n) <= seen || n >= maxFallbackNodes || s.seenRegions.CompareAndSwap(seen, int64(n)) {
			return
		}
	}
}
