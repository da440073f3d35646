package lease

import (
	"github.com/allot-dev/allot/internal/mutate"
	"math"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// estimate is a key's demand as the Core measures it, and the lease size
// that follows from it.
type estimate struct {
	// rate is the EWMA of demand, tokens per second; fast the same over two
	// sweeps: how fast a share follows a surge. float32 keeps seven digits,
	// more than a lease size or a share needs, in half the bytes.
	rate, fast float32
	lastTaken  int64 // the key's taken() at the last sample
	lastSample mono
	lastActive mono  // the last sample that saw demand
	size       int64 // the lease size to ask for
}

// sample updates the key's demand rate (an EWMA over the rate window) and
// the lease size that follows from it; it returns the tokens taken from the
// lease since the last sample.
func (k *KeyLease) sample(e *env, now mono) int64 {
	s := &k.est
	taken := k.taken()
	took := taken - s.lastTaken
	asked := k.demand.Swap(0)
	demand := took + asked
	s.lastTaken = taken
	elapsed := now.Sub(s.lastSample)
	if elapsed <= 0 {
		k.demand.Add(asked) // counted at the next sample
		return took
	}
	s.lastSample = now
	if demand > 0 {
		s.lastActive, k.req.askedAgain = now, true
	}
	if asked > 0 && k.req.sent {
		k.req.starved = true
	}
	alpha := 1 - math.Exp(-elapsed.Seconds()/e.cfg.RateWindow.Seconds())
	seen := float64(demand) / elapsed.Seconds()
	rate := float64(s.rate) + alpha*(seen-float64(s.rate))
	fast := 1 - math.Exp(-elapsed.Seconds()/(2*e.cfg.Sweep).Seconds())
	s.rate, s.fast = float32(rate), float32(float64(s.fast)+fast*(seen-float64(s.fast)))
	r := k.Rule()
	// The size follows the faster of the two estimates up, so that a surge
	// is met within a few sweeps and not the rate window's second, and
	// falls by at most half a sample. Demand the lease could not meet at
	// least doubles it, until the lease keeps up: unless the last grant fell
	// short, when the allocator had no more to give and a larger lease
	// would only hold back from the other holders what this key cannot use
	// (a node at a twentieth of a fixed window's load, refused as the window
	// ran out, asked for twenty times its part of the next window).
	size := max(rate, float64(s.fast)) * r.Lease.Refresh.Seconds()
	size = max(size, float64(s.size)/2)
	if asked > 0 && k.req.sent && !k.req.short {
		size = max(size, float64(2*s.size), float64(s.size+asked))
	}
	if mutate.On(mutate.SizeByHistory) {
		size = rate * r.Lease.Refresh.Seconds()
	}
	k.resize(r, size)
	return took
}

// resize sets the lease size to tokens, within the rule's bounds, and the
// watermark that goes with it.
func (k *KeyLease) resize(r *rules.Rule, tokens float64) {
	size := min(max(int64(math.Ceil(math.Min(tokens, float64(r.Lease.Max)))), r.Lease.Min), r.Lease.Max)
	k.est.size = size
	if k.phase != phaseDormant {
		k.low.Store(watermark(size))
	}
}

// watermark is the level below which a key without a share asks for a
// refill: half its lease, or, for a lease of a few tokens (the long tail of
// keys), the whole of it. A lease of two tokens with a watermark of one
// runs dry whenever two requests come within a round trip, and a served
// key with a dry lease refuses.
func watermark(size int64) int64 {
	if size <= smallLease {
		return size
	}
	return (size + 1) / 2
}

// smallLease is the largest lease refilled as soon as a token is taken.
const smallLease = 4

// fillTime is how long the rule's bucket takes to fill from empty.
func fillTime(r *rules.Rule) time.Duration {
	return time.Duration(min(float64(r.Capacity())/r.Rate()*float64(time.Second), math.MaxInt64/2))
}

// quiet reports whether the key has had no demand for long enough that its
// share should go back: three of its own inter-arrival times, and at least
// two sweeps; a busy key gives its share back within a few sweeps, a slow
// one is not taken for gone between two requests.
func (k *KeyLease) quiet(e *env, now mono) bool {
	if k.ownerBusy() {
		return false
	}
	return now.Sub(k.est.lastActive) >= k.quietAfter(e)
}

// demandRate is what the key's requests say its demand is
// (Request.Demand): its owner's word, or its rate estimate, the fast one
// when demand has just surged or fallen by half and the fast one rests on
// a few requests (wantRate's reading).
func (k *KeyLease) demandRate(e *env) float64 {
	if d, ok := k.ownerDemand(); ok {
		return d
	}
	rate, fast := float64(k.est.rate), float64(k.est.fast)
	if (fast > 2*rate || fast < rate/2) && e.fewRequests(max(fast, rate)) {
		return fast
	}
	return rate
}

// fewRequests reports whether a rate of rate tokens a second makes the
// few requests (four) over the fast estimate's window (two sweeps) that it
// takes to be read: a slow key's fast estimate swings between nothing and
// several times its rate.
func (e *env) fewRequests(rate float64) bool { return rate*(2*e.cfg.Sweep).Seconds() >= 4 }

// quietAfter is how long after its last demand a key is quiet.
func (k *KeyLease) quietAfter(e *env) time.Duration {
	after := 2 * e.cfg.Sweep
	if rate := float64(k.est.rate); rate > 0 {
		after = max(after, time.Duration(min(6/rate, 3600)*float64(time.Second)))
	}
	return min(after, k.Rule().Lease.TTL/2)
}

// idleAfter is how long a key without demand stays: half a lease TTL, and,
// with a fallback allowance, until the allowance would be full again (the
// rule's fill time): forgetting it earlier would hand the key a fresh one.
func (k *KeyLease) idleAfter() time.Duration {
	r := k.Rule()
	if k.fallback.Load() != nil {
		return max(r.Lease.TTL/2, fillTime(r))
	}
	return r.Lease.TTL / 2
}

// idle reports whether the key should leave: its rule is gone (nothing can
// be reported or returned for it any more), or it has had no demand for
// idleAfter and has nothing in flight or unreported. A key whose owner's
// holders still hold what it lent them (SetHeldBelow) stays: leaving, it
// would end its holding at the store, whose bucket would then refill the
// room those tokens still fill (a region's node holding 900 of a burst of
// 1,000 through a quiet spell, and a node of another region lent 322
// beside it when the region left the key).
func (k *KeyLease) idle(now mono) bool {
	if k.table.gone.Load() {
		return k.req.inFlight == nil
	}
	if k.req.inFlight != nil || k.req.unacked != nil || k.is(bitQueued) || k.owes() || k.heldBelow() > 0 || k.ownerBusy() {
		return false
	}
	// A window key stays while its lease may be in force: the store counts
	// it present in the lease's window, and lends the rest of it to the
	// others. Gone, with its Release lost to a cut, it was made again on
	// a full fallback allowance in that window (seed 303679: 21 of 20).
	if k.Rule().Algorithm != rules.TokenBucket && now.Before(mono(k.served.Load())) {
		return false
	}
	return now.Sub(k.est.lastActive) >= k.idleAfter()
}
