package fallback

import (
	"github.com/allot-dev/allot/internal/mutate"
	"math"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Allowance is what one node may admit on one key without the allocator:
// its part of the rule, in the rule's own shape (docs/bounds.md, rule 5).
// For a token bucket it is a bucket of burst/N refilled at rate/N; for a
// window rule, limit/N per window of the store, counted only on the part of
// the node's clock that certainly lies inside that window, or limit/(2N)
// per window of the node's own clock while it does not know where the
// store's windows lie (a store window then overlaps at most two of them).
// A sliding log, decided centrally, falls back to the unaligned windows.
//
// Time is the node's monotonic clock, as a duration from its origin: a step
// of the wall clock moves nothing here. It also counts what it admitted,
// for the report that debits it centrally. Safe for concurrent use.
type Allowance struct {
	mu sync.Mutex
	// rule and nodes are what the state below was last sized for.
	rule  *rules.Rule
	nodes int

	// A token bucket's tokens at stamp; full marks a fresh allowance whose
	// first decision fills it.
	tokens float64
	stamp  time.Duration
	full   bool

	// A window rule's count in window epoch, which began (for certain) at
	// start on the node's clock; no window before from admits.
	epoch, used, from int64
	start             time.Duration

	// consumed is what it admitted and has not yet handed to a report,
	// since is when the first of it was admitted (valid when consumed > 0).
	consumed int64
	since    time.Duration
	closed   bool
}

// NewAllowance returns a fresh allowance that starts full: for a key the
// node held no lease on.
func NewAllowance() *Allowance {
	return &Allowance{full: true, from: math.MinInt64}
}

// AfterLease returns the allowance of a key whose lease has ended: a token
// bucket starts empty and earns from `from`, the latest instant the lease
// could end at the store; a window rule admits nothing before the window
// after the lease's, epoch (which the store lent for).
//
// prev, if not nil, is the key's allowance that the lease's grant closed.
// A window it counted in that the new one may admit in goes on with its
// count: a grant of an earlier window (an answer replayed for a request
// sent again) ends no fallback window, and the store reserved the node
// one l/N in it, not two.
func AfterLease(from time.Duration, epoch int64, prev *Allowance) *Allowance {
	a := &Allowance{stamp: from, from: math.MinInt64}
	if epoch != math.MinInt64 {
		a.from = epoch + 1
	}
	if prev != nil && epoch != math.MinInt64 {
		prev.mu.Lock()
		if prev.used > 0 && prev.epoch >= a.from {
			a.epoch, a.used, a.start = prev.epoch, prev.used, prev.start
		}
		prev.mu.Unlock()
	}
	return a
}

// Windows says where the store's windows lie on the node's monotonic clock:
// the store's clock reads mono + d for some d in [Lo, Hi]. Known is false
// when the node has never learned it; Lo and Hi are then its own guess
// (its wall clock less its monotonic one), and window allowances halve.
type Windows struct {
	Lo, Hi time.Duration
	Known  bool
}

// LatestWindow is the latest store window of period p that the node's
// instant at (its monotonic clock) may lie in; one more while the windows'
// place is a guess, as a store window then overlaps two of the node's.
func (w Windows) LatestWindow(at, p time.Duration) int64 {
	e := floorDiv(at+w.Hi, p)
	if !w.Known {
		e++
	}
	return e
}

// Result is one fallback decision.
type Result struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration // when refused: until a request of this cost could pass here
	ResetAfter time.Duration // until the allowance is whole again
}

// Decide decides n tokens at now with the fleet at nodes. ok is false when
// the allowance was closed (the key was served meanwhile): decide again.
func (a *Allowance) Decide(r *rules.Rule, nodes int, w Windows, now time.Duration, n int64) (res Result, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return Result{}, false
	}
	nodes = max(nodes, 1)
	if r.Algorithm == rules.TokenBucket || mutate.On(mutate.WindowAsBucket) {
		res = a.bucket(r, nodes, now, n)
	} else {
		res = a.window(r, nodes, w, now, n)
	}
	if res.Allowed {
		if a.consumed <= 0 {
			a.since = now
		}
		a.consumed += n
	}
	return res, true
}

// bucket decides on the token bucket of burst/N at rate/N.
func (a *Allowance) bucket(r *rules.Rule, nodes int, now time.Duration, n int64) Result {
	capacity := math.Floor(float64(r.Burst) / float64(nodes))
	rate := r.Rate() / float64(nodes) // tokens per second
	if a.full {
		a.tokens, a.stamp, a.full = capacity, now, false
	}
	if now > a.stamp {
		a.tokens += rate * (now - a.stamp).Seconds()
		a.stamp = now
	}
	// A shrinking fleet must not mint a burst: never more than the capacity.
	a.tokens = math.Min(a.tokens, capacity)
	a.rule, a.nodes = r, nodes
	res := Result{}
	if float64(n) <= capacity && a.tokens >= float64(n) {
		a.tokens -= float64(n)
		res.Allowed = true
	} else if float64(n) <= capacity {
		// (Before the allowance starts earning, the wait runs from then.)
		res.RetryAfter = max(a.stamp-now, 0) + seconds((float64(n)-a.tokens)/rate)
	} else {
		res.RetryAfter = r.Period // never on this node alone: it waits for the allocator
	}
	res.Remaining = int64(math.Max(math.Floor(a.tokens), 0))
	res.ResetAfter = max(a.stamp-now, 0) + seconds((capacity-a.tokens)/rate)
	return res
}

// window decides on limit/N (or limit/2N) per store window.
func (a *Allowance) window(r *rules.Rule, nodes int, w Windows, now time.Duration, n int64) Result {
	p := r.Period
	allowance := r.Limit / int64(nodes)
	if r.Algorithm == rules.SlidingLog {
		// A log's period slides: any period of it overlaps two windows,
		// wherever they lie, so they are the halved ones, on the node's own
		// clock: windows that move when the estimate of the store's clock
		// does let a period overlap three (a node back from a cut, told the
		// store's clock anew, admitted 101 of its 100 in 0.8 s).
		w = Windows{}
	}
	if !w.Known || r.Algorithm == rules.SlidingLog {
		allowance = r.Limit / int64(2*nodes)
	}
	a.rule, a.nodes = r, nodes
	// The window that certainly holds now, by both ends of the offset.
	lo, hi := floorDiv(now+w.Lo, p), floorDiv(now+w.Hi, p)
	start := func(e int64) time.Duration { return mul(e, p) - w.Lo } // certainly in window e from here
	if lo != hi {                                                    // between two windows: it may be either
		return Result{RetryAfter: start(hi) - now, ResetAfter: start(hi) - now}
	}
	if lo < a.from { // the window the key held a lease in, or earlier
		wait := start(a.from) - now
		return Result{RetryAfter: wait, ResetAfter: wait}
	}
	if lo < a.epoch {
		// A newer estimate of the store's clock puts now in a window before
		// the one counted: counting that one afresh could admit its
		// allowance twice. It waits for the counted window's successor.
		wait := start(a.epoch+1) - now
		return Result{RetryAfter: wait, ResetAfter: wait}
	}
	if a.epoch != lo {
		// What the ended window admitted and no report has carried is not
		// reported: the store counts a report in the window it began in,
		// and that one is over.
		a.epoch, a.used, a.start = lo, 0, start(lo)
		if a.consumed > 0 && a.since < a.start {
			a.consumed = 0
		}
	}
	next := start(lo+1) - now
	if a.used+n <= allowance {
		a.used += n
		return Result{Allowed: true, Remaining: allowance - a.used, ResetAfter: next}
	}
	return Result{Remaining: max(allowance-a.used, 0), RetryAfter: next, ResetAfter: next}
}

// Refund gives back n tokens Decide admitted for a request that did not go
// ahead after all (a multi-rule check that another rule refused). It
// reports false when the allowance was closed meanwhile.
func (a *Allowance) Refund(n int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.consumed = max(a.consumed-n, 0)
	if a.rule != nil && a.rule.Algorithm == rules.TokenBucket {
		a.tokens = math.Min(a.tokens+float64(n), math.Floor(float64(a.rule.Burst)/float64(max(a.nodes, 1))))
	} else {
		a.used = max(a.used-n, 0)
	}
	return true
}

// TakeConsumed hands what it admitted since the last report to a new one:
// the tokens and how long before now the first of them was admitted.
func (a *Allowance) TakeConsumed(now time.Duration) (int64, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, age := a.consumed, max(now-a.since, 0)
	a.consumed = 0
	if n <= 0 {
		return 0, 0
	}
	return n, age
}

// RestoreConsumed puts back a report that did not reach the allocator:
// n tokens, the first admitted at since. A window rule's report of a window
// that has ended is dropped (see window).
func (a *Allowance) RestoreConsumed(n int64, since time.Duration) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rule != nil && a.rule.Algorithm != rules.TokenBucket && since < a.start {
		return
	}
	if a.consumed <= 0 || since < a.since {
		a.since = since
	}
	a.consumed += n
}

// Close ends the allowance (the key is served again) and returns what it
// admitted that no report carries yet; Decide and Refund fail from then on.
func (a *Allowance) Close(now time.Duration) (int64, time.Duration) {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	return a.TakeConsumed(now)
}

// Admits reports whether a node's allowance of r over nodes can ever admit
// a request: not when the rule's capacity split over the fleet is less than
// a token.
func Admits(r *rules.Rule, nodes int) bool { return r.Capacity()/int64(max(nodes, 1)) > 0 }

// seconds converts s seconds to a duration, saturating far out.
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Min(s*float64(time.Second), math.MaxInt64/2))
}

// floorDiv is floor(d/p) for p > 0.
func floorDiv(d, p time.Duration) int64 {
	q := int64(d / p)
	if d%p != 0 && d < 0 {
		q--
	}
	return q
}

// mul is e·p, saturating.
func mul(e int64, p time.Duration) time.Duration {
	if e != 0 && (int64(p) > math.MaxInt64/abs(e)) {
		if e < 0 {
			return math.MinInt64 / 2
		}
		return math.MaxInt64 / 2
	}
	return time.Duration(e) * p
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Pending reports whether it admitted what no report has carried yet.
func (a *Allowance) Pending() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.consumed > 0
}
