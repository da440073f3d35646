package lease

import (
	"github.com/allot-dev/allot/internal/mutate"
	"math"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
)

// Verdict is one decision on a key.
type Verdict struct {
	Allowed bool
	// Fallback says the fallback allowance decided, not a lease.
	Fallback bool
	// Wait says the key's first lease is on its way and the allocator
	// answers: wait for an answer (Core.Answered) and decide again, with
	// AfterWait. No token is admitted without the allocator's say while it
	// answers (docs/bounds.md, rule 1).
	Wait bool
	// Gone says the key left its table meanwhile: look it up again.
	Gone       bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration

	gen       uint64 // the lease's generation when its tokens were taken
	allowance *fallback.Allowance
}

// Attempt says whether a decision is a request's first or one after a
// Wait (its demand was counted at the first).
type Attempt uint8

const (
	FirstAttempt Attempt = iota
	AfterWait
)

// Decide decides a request of n tokens at now, the node's monotonic clock;
// wall is its wall clock (a window rule's guess of the store's windows
// while it knows none) and nodes the fleet size its fallback divides by,
// or what the allocator last told the key's fallback to divide by, if
// more (FallbackNodes). attempt says whether the caller decides again after a Wait,
// whose demand was counted. It never blocks.
func (k *KeyLease) Decide(n int64, now time.Duration, wall time.Time, nodes int, attempt Attempt) Verdict {
	for {
		gen := k.gen.Load()
		if sb := k.win.spendBy.Load(); sb == 0 || monoAt(now) < mono(sb) {
			left, ok := k.Take(n)
			if ok {
				return Verdict{Allowed: true, Remaining: k.remaining(left), gen: gen}
			}
			if left < 0 {
				return Verdict{Gone: true}
			}
		} else {
			// A window's oldest tokens died with their window and the Core,
			// late, has not taken them out yet: none is spent (a node whose
			// loop ran 20 ms late spent them in the next window: 101 of
			// 100). It takes them out as soon as it runs.
			k.WantRefill()
			if k.tokens.Load() < 0 {
				return Verdict{Gone: true}
			}
		}
		r := k.Rule()
		c := k.table.c
		a := k.fallback.Load()
		if a == nil {
			served := mono(k.served.Load())
			down := c.DownAt(now)
			if served == 0 {
				down = c.DownForNew(now)
			}
			if mutate.On(mutate.FallbackWhileServed) && served != 0 && !monoAt(now).Before(served) {
				down = true // (the old fault: unserved at its lease's end, it falls back)
			}
			if mutate.On(mutate.FallbackInFlight) && served == 0 {
				down = true // (the old fault: a new key falls back while its first lease is on its way)
			}
			switch {
			case !down && served == 0: // its first lease is on its way
				if attempt == FirstAttempt {
					k.demand.Add(n)
				}
				k.WantRefill()
				return Verdict{Wait: true}
			case !down || monoAt(now).Before(served):
				// Served: the allocator answers, or the lease may still be in
				// force at the store. An empty key waits for its next lease.
				k.Refused(n)
				return k.refusedOnLease(r, n, monoAt(now))
			case r.Failure == rules.FailClosed:
				k.Refused(n)
				return Verdict{Fallback: true, RetryAfter: r.Lease.Refresh}
			}
			a = k.newAllowance(served, c.Windows(time.Duration(wall.UnixNano())-now))
		} else if !c.DownAt(now) && !mutate.On(mutate.FallbackWhileServed|mutate.FallbackInFlight) {
			// The allocator answers again: the key's next grant decides, and
			// its allowance waits for it. Admitted meanwhile, past the report
			// the allocator counts, a window would lend what the allowance
			// admits a second time (1,005 in a window of 1,000 as a node came
			// back from a cut).
			k.Refused(n)
			return k.refusedOnLease(r, n, monoAt(now))
		}
		res, ok := a.Decide(r, max(nodes, k.FallbackNodes()), c.Windows(time.Duration(wall.UnixNano())-now), now, n)
		if !ok {
			continue // a grant closed it: the lease decides again
		}
		k.demand.Add(n)
		k.WantRefill() // a refill, or the report of what it admitted
		v := Verdict{Allowed: res.Allowed, Fallback: true, Remaining: res.Remaining,
			RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter}
		if res.Allowed {
			v.allowance = a
		}
		return v
	}
}

// remaining is what a lease decision says is left: the key's own tokens,
// and its part of what the allocator had left after its last grant, for
// the caller's RateLimit fields (the node cannot know more without asking).
func (k *KeyLease) remaining(left int64) int64 {
	return max(left, 0) + k.central.Load()/int64(max(k.Holders(), 1))
}

// newAllowance gives the key its fallback allowance, the first decision
// that needs one: full for a key the allocator never answered for, empty
// and earning from the latest end of its lease for one it did. A window
// key admits nothing in the window of its lease, nor in the latest one its
// unanswered request may be applied in (w: where the store's windows lie):
// the store counts it present there, and lends the rest of the window to
// the others.
func (k *KeyLease) newAllowance(served mono, w fallback.Windows) *fallback.Allowance {
	a, prev := fallback.NewAllowance(), k.win.closed.Load()
	if served != 0 {
		epoch := int64(math.MinInt64)
		if r := k.Rule(); r.Algorithm != rules.TokenBucket && !mutate.On(mutate.FallbackWhileServed) {
			epoch = k.win.epoch.Load()
			if at := k.win.unanswered.Load(); at != 0 {
				epoch = max(epoch, w.LatestWindow(mono(at).sinceOrigin(), r.Period))
			}
		}
		a = fallback.AfterLease(served.sinceOrigin(), epoch, prev)
	}
	if !k.fallback.CompareAndSwap(nil, a) {
		if cur := k.fallback.Load(); cur != nil {
			return cur
		}
	}
	k.win.closed.CompareAndSwap(prev, nil)
	return a
}

// Undo gives back the n tokens v took, for a request that did not go
// ahead after all, and reports how many went back: none when their lease
// has ended since or the allowance closed.
func (k *KeyLease) Undo(v Verdict, n int64) int64 {
	switch {
	case !v.Allowed:
		return 0
	case v.allowance != nil:
		if v.allowance.Refund(n) {
			k.demand.Add(-n)
			return n
		}
	case k.Give(n, v.gen):
		return n
	}
	return 0
}

// leaseRetry estimates when a starved key may pass: not before its next
// refill, and for a token bucket not before the rule could have made n
// tokens; for a window rule the store spent, when the store said its
// window frees them (windowFrees).
func (k *KeyLease) leaseRetry(r *rules.Rule, n int64, now mono) time.Duration {
	if r.Algorithm != rules.TokenBucket {
		return max(k.retryIn(now), k.windowFrees(now), time.Millisecond)
	}
	// A debt is paid before anything else is admitted (debt.go).
	made := time.Duration(min(float64(n+max(k.debt.Load(), 0))/r.Rate()*float64(time.Second), math.MaxInt64/2))
	return max(k.retryIn(now), made, time.Millisecond)
}

// windowFrees is how long until the store's window frees what a window
// key was refused, as its last grant said: 0 when it said nothing, or its
// instant has passed (the window moved on).
func (k *KeyLease) windowFrees(now mono) time.Duration {
	if at := mono(k.win.freesAt.Load()); at != 0 {
		return max(at.Sub(now), 0)
	}
	return 0
}

// refusedOnLease is a lease's refusal of n tokens at now: what is left,
// and when to retry. A window rule's resets when its window frees what
// was refused, when the store said so.
func (k *KeyLease) refusedOnLease(r *rules.Rule, n int64, now mono) Verdict {
	v := Verdict{Remaining: k.remaining(0), RetryAfter: k.leaseRetry(r, n, now)}
	if r.Algorithm != rules.TokenBucket && k.windowFrees(now) > 0 {
		v.ResetAfter = v.RetryAfter
	}
	return v
}
