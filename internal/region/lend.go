package region

import (
	"context"
	"math"
	"time"

	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// What a region lends a node of a global key, and why it stays within the
// parent's bound (docs/bounds.md, "Regions"):
//
//   - Tokens only, taken out of the region's lease on the key
//     (KeyLease.TakeUpTo): a node is lent nothing the parent did not lend
//     the region, and nothing twice.
//   - For no longer than those tokens live there (KeyLease.LiveFor): a
//     node spends a grant before its request's send time plus the TTL,
//     which is no later than the region's now plus the TTL, the earliest
//     end of the region's leases, itself no later than the parent's.
//   - What a node admitted outside a lease (its fallback) and what its
//     settled costs took beyond what it held are charged to the region's
//     lease (KeyLease.Charge): its tokens, then its debt, which goes to
//     the parent with the key's next request.
//   - What a node gives back is dropped. KeyLease.Give puts tokens back
//     into the lease's counter but into none of its spans once the Core
//     has charged the take to one: they would live to the newest lease's
//     end, past the parent lease they came from. Dropped, the parent
//     counts them spent, which costs accuracy and never the bound.

// minLive is the least a region's tokens must still live to be lent: a
// node's lease shorter than a few ms ends before it can spend it, and
// costs a call for nothing.
const minLive = 5 * time.Millisecond

// keyLease is the region's lease on the key under r, nil when its lease
// manager holds as many keys as it may.
func (s *Store) keyLease(r *rules.Rule, key string) *lease.KeyLease {
	return s.mgr.Table(r.Base()).Key(key)
}

// lend answers one node's request on a global key.
func (s *Store) lend(ctx context.Context, req *store.AcquireRequest) store.Lease {
	r := req.Rule
	id := lenderID{r.Base().Name, req.Key}
	if last, ok := s.keys.replay(id, req.Node, req.Seq); ok {
		return last // a retry whose answer was lost: answered again, not applied again
	}
	now := s.clk.Mono()
	s.reserve(r, req.Key, now)
	// What the node admitted on its fallback is set against what was
	// withheld for it while it was absent; the rest, and its settled
	// costs, are charged.
	covered := s.keys.cover(id, req.Node, req.Consumed)
	if n := req.Consumed - covered + req.Settled; n > 0 {
		s.charge(r, req.Key, n, now)
	}
	if req.Returned > 0 {
		s.lost.Add(req.Returned)
	}
	got, ttl, k := s.take(ctx, r, req.Key, req.Want)
	s.meter.asked.Add(max(req.Want, 0))
	s.meter.lentOut.Add(got)
	now = s.clk.Mono()
	g := store.Lease{Granted: got, TTL: ttl}
	if got == 0 {
		// Nothing lent, nothing to outlive: the node counts itself served
		// (and does not fall back) for a lease's TTL, as any refusal says.
		g.TTL = r.Lease.TTL
	}
	// The region's part of the rule's fallback is what the parent told it
	// (or its count of the key's holders, if more, as a node divides by).
	parent := 1
	if k != nil {
		g.Remaining = k.Tokens()
		told := max(k.FallbackNodes(), k.Holders()) // (0 before the parent answered)
		parent = max(told, 1)
		s.sawRegions(told)
	}
	if got < req.Want {
		g.RetryAfter = retryAfter(r, req.Want-got)
	}
	s.sweep(now)
	s.absent.watch(id, r, now+r.Lease.TTL)
	held := int64(0) // (a node that does not say what it holds is taken to hold what it is lent now)
	if req.HeldKnown {
		held = max(req.Held, 0)
	}
	defer func() {
		if k != nil {
			s.sayBelow(k, id, now)
		}
	}()
	q := holding{node: req.Node, seq: req.Seq, now: now, until: now + r.Lease.TTL, absence: r.Lease.Absence(),
		said: req.FallbackNodes, parent: int64(parent), held: held, demand: req.Demand, fromOnFallback: req.OnFallback}
	return s.keys.hold(id, q,
		func(holders int, fallbackNodes int64, used float64) store.Lease {
			g.Holders, g.FallbackNodes = holders, fallbackNodes
			if k != nil {
				// The parent may have told the region a smaller part since
				// its nodes were told theirs: its requests say what they
				// may still use until they have all asked again.
				k.SetUsing(usingNodes(used))
			}
			return g
		})
}

// sayBelow tells the region's lease on the key what its present holders
// hold of what it lent them, told to the parent with the region's own
// (rule 6 across the tree), and their demand, which is the region's: the
// parent splits the rule by it (KeyLease.SetDemand). While none of them
// says a demand (nodes before LeaseRequest.demand, or none present), the
// lease measures its own, and goes quiet when nothing is taken.
func (s *Store) sayBelow(k *lease.KeyLease, id lenderID, now time.Duration) {
	held, demand, said := s.keys.below(id, now)
	k.SetHeldBelow(held)
	if !said {
		demand = -1 // (nothing said)
	}
	k.SetDemand(demand)
}

// reserve withholds from the key's lease what its absent holders'
// fallbacks may admit (lenders.reserve), before anything else is taken.
func (s *Store) reserve(r *rules.Rule, key string, now time.Duration) {
	k := s.keyLease(r, key)
	if k == nil {
		return
	}
	s.keys.reserve(lenderID{r.Base().Name, key}, now, r.Rate(), func(n int64, fresh float64) int64 {
		got := max(k.TakeUpTo(n), 0)
		s.withheld.Add(got)
		if got < n && fresh >= 1 {
			// The lease lacks it: what accrued since is the key's demand,
			// so that the region asks the parent for it (what was owed
			// before was counted when it accrued).
			k.Refused(min(n-got, int64(fresh)))
		}
		return got
	})
}

// sweep forgets, every ten seconds, the keys no node holds any more.
func (s *Store) sweep(now time.Duration) {
	last := s.swept.Load()
	if now-time.Duration(last) < 10*time.Second || !s.swept.CompareAndSwap(last, int64(now)) {
		return
	}
	s.keys.sweep(now)
}

// take takes up to want tokens of the region's lease on the key, and the
// TTL they may be lent for. A key the region holds no lease on yet waits
// for its first (within ctx), as a node's first request does.
func (s *Store) take(ctx context.Context, r *rules.Rule, key string, want int64) (int64, time.Duration, *lease.KeyLease) {
	var k *lease.KeyLease
	for range 3 { // (a key that leaves its table meanwhile is looked up again)
		if k = s.keyLease(r, key); k == nil || want <= 0 {
			return 0, 0, k
		}
		live, gone := s.waitLive(ctx, r, k)
		if gone {
			continue
		}
		if live <= minLive {
			got, ttl := s.fallback(r, k, want)
			return got, ttl, k
		}
		got := k.TakeUpTo(want)
		if got < 0 {
			continue
		}
		if got < want {
			k.Refused(want - got)
		}
		ttl := min(r.Lease.TTL, live)
		if s.lent != nil && got > 0 {
			s.lent(ttl, live)
		}
		return got, ttl, k
	}
	return 0, 0, k
}

// firstWait is the longest a node's request waits for the region's lease
// on a key it holds none of: well within a node's lease call's deadline
// (250 ms by default), which, passed, would put the node on its fallback
// while the region answers. A parent further away than this is answered
// later; the node is refused meanwhile and asks again.
const firstWait = 100 * time.Millisecond

// waitLive is how long the key's tokens live, read just before they are
// taken; when it holds no lease, it waits for an answer from the parent
// first, at most firstWait and until ctx is nearly over, unless the parent
// is down. gone says the key
// left its table: look it up again.
func (s *Store) waitLive(ctx context.Context, r *rules.Rule, k *lease.KeyLease) (live time.Duration, gone bool) {
	wait := firstWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)*3/4)
	}
	var timeout <-chan time.Time
	for {
		answered := s.mgr.Answered() // (before the look: an answer between the two wakes it)
		if live = k.LiveFor(s.clk.Mono()); live > 0 {
			return live, false
		}
		if s.mgr.Table(r.Base()).Lookup(k.Key()) != k {
			return 0, true
		}
		if s.mgr.Down() {
			// No answer is coming soon: the fallback decides now, or the
			// grant it lends would arrive as late as the wait.
			return 0, false
		}
		if timeout == nil {
			t := s.clk.NewTimer(wait)
			defer t.Stop()
			timeout = t.C()
		}
		select {
		case <-answered:
		case <-timeout:
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}

// charge counts n tokens a node admitted outside the region's lease
// against it: from its tokens, then as its debt, reported to the parent.
// What passes the rule's debt is dropped, as a node's own is.
func (s *Store) charge(r *rules.Rule, key string, n int64, now time.Duration) {
	for range 3 {
		k := s.keyLease(r, key)
		if k == nil {
			return
		}
		if _, gone := k.Charge(lease.Verdict{Allowed: true}, n, now); !gone {
			return
		}
	}
}

// retryAfter is when a node refused need tokens may ask again: when the
// rule's rate makes them, within [5 ms, 50 ms], as the region's lease is
// refilled from the parent continually.
func retryAfter(r *rules.Rule, need int64) time.Duration {
	d := time.Duration(min(float64(need)/r.Rate()*float64(time.Second), math.MaxInt64/2))
	return min(max(d, 5*time.Millisecond), 50*time.Millisecond)
}

// release forgets a node as a holder of the key; what it gives back is
// dropped (see above).
func (s *Store) release(ret *store.Return) {
	s.lost.Add(max(ret.Tokens, 0))
	id, now := lenderID{ret.Rule.Base().Name, ret.Key}, s.clk.Mono()
	s.keys.leave(id, ret.Node, now)
	if k := s.mgr.Table(ret.Rule.Base()).Lookup(ret.Key); k != nil {
		s.sayBelow(k, id, now) // (the node's part leaves the region's demand)
	}
}

// check decides cost tokens of a global key from the region's lease, all
// or none.
func (s *Store) check(ctx context.Context, r *rules.Rule, key string, cost int64) (store.Decision, error) {
	if err := ctx.Err(); err != nil {
		return store.Decision{}, err
	}
	if cost > r.Capacity() {
		return store.Decision{}, store.ErrCostAboveCapacity
	}
	d := store.Decision{Limit: r.Limit, RetryAfter: retryAfter(r, cost)}
	s.meter.asked.Add(cost)
	s.reserve(r, key, s.clk.Mono())
	for range 3 {
		k := s.keyLease(r, key)
		if k == nil {
			return d, nil
		}
		live, gone := s.waitLive(ctx, r, k)
		if gone {
			continue
		}
		if live <= minLive {
			if !s.mayFallBack(k) {
				k.Refused(cost)
				return d, nil
			}
			v := s.decide(k, cost, lease.FirstAttempt)
			if !v.Allowed {
				d.Remaining = v.Remaining
				d.RetryAfter = max(d.RetryAfter, v.RetryAfter)
				return d, nil
			}
			s.meter.lentOut.Add(cost)
			return store.Decision{Allowed: true, Limit: r.Limit, Remaining: v.Remaining}, nil
		}
		left, ok := k.Take(cost)
		if left < 0 {
			continue
		}
		if !ok {
			k.Refused(cost)
			d.Remaining = left
			return d, nil
		}
		s.meter.lentOut.Add(cost)
		return store.Decision{Allowed: true, Limit: r.Limit, Remaining: left}, nil
	}
	return d, nil
}
