package store

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// This file and core_*.go (the token bucket, the windows, the sliding log,
// the holders) are the reference semantics of every store. Time is integer
// microseconds from the store's own clock (Redis TIME, or the memory store's
// injected clock), never the caller's. Token counts are float64, as in Redis
// Lua; the scripts in lua/ perform the same operations in the same order so
// that both stores reach the same numbers.

// state is one (rule, key): its algorithm's own part, and what every
// algorithm but concurrency keeps of its holders. A state serves one
// algorithm all its life (a rule whose algorithm changes on reload starts
// afresh), so the parts of the others stay zero.
type state struct {
	bucket  bucket            // a token bucket's (core_bucket.go)
	window  window            // a fixed or sliding window's (core_window.go)
	log     slidingLog        // a sliding log's (core_log.go)
	slots   *slotState        // a concurrency rule's (core_concurrency.go); nil for the others
	holders map[string]holder // who holds a lease on the key, and their last answers (replay)
	expires int64             // µs after which the state may be forgotten
}

type holder struct {
	until    int64   // µs
	want     int64   // tokens
	wantRate float64 // tokens per second the holder asked for as a share
	rate     float64 // tokens per second of the rule's rate lent until until
	seq      int64   // the holder's last applied request, 0: none
	granted  int64   // the tokens that request was granted
	// held is what the holder was lent in window epoch (0 for a token
	// bucket) and has not given back: the most it may give back, with what
	// its share earned since its last request.
	held  float64
	epoch int64
	// n is the least its fallback may divide by until its next request:
	// its last lease's FallbackNodes, or what it said it divided by when
	// it sent that request if fewer (the answer may never reach it). So it
	// is what the store reserves for it while it is absent
	// (core_absence.go), and its part of the key's fallback budget
	// (fallbackNodes).
	n int64
	// back is the µs at which the holder came back from an absence whose
	// fallback the store reserved for, 0 when its last request was no such
	// return: its reservation lasts until its next request, as its fallback
	// admits until the return's answer arrives. backN is the count that
	// fallback divides by (what the holder was told before it came back),
	// and backUsed, for a window, what it has reported in the window it
	// came back in since it came back there (core_absence.go).
	back     int64
	backN    int64
	backUsed float64
}

// newState is what a missing key means: a full bucket, an empty window.
// A bucket's state expires only once it is full, so a missing bucket is
// full; it counts as full for two lease TTLs (refilled that far back),
// which for a key never seen is short of the truth, and for one forgotten a
// moment ago is not: its last tokens came in while nobody asked for them
// (see fullness).
func newState(r *rules.Rule, now int64) *state {
	st := &state{}
	if r.IsConcurrency() {
		st.slots = &slotState{holders: map[string]slotHolder{}}
	}
	if r.Algorithm == rules.TokenBucket {
		st.bucket.tokens, st.bucket.refilled = float64(r.Burst), now-2*r.Lease.TTL.Microseconds()
	}
	return st
}

func periodUS(r *rules.Rule) int64 { return r.Period.Microseconds() }

// stateVariant is what, beyond the algorithm, makes a state meaningless
// under another version of its rule: a window's index counts periods, so a
// window whose period changes on reload starts afresh (kept, a longer
// period would put the stored index far in the future: a window that never
// ends, as the clock never passes it). A token bucket's state means the
// same whatever the rate.
func stateVariant(r *rules.Rule) string {
	if r.IsCalendar() {
		// A calendar window is indexed by its start: another unit or zone
		// would find its stored window misplaced.
		return "@" + strings.ReplaceAll(r.Calendar.String(), " ", ":")
	}
	if r.Algorithm == rules.FixedWindow || r.Algorithm == rules.SlidingWindow {
		return "@" + strconv.FormatInt(periodUS(r), 36)
	}
	return ""
}

func ratePerUS(r *rules.Rule) float64 { return float64(r.Limit) / float64(periodUS(r)) }

func us(d int64) time.Duration { return time.Duration(d) * time.Microsecond }

// absenceUS is rules.LeaseTuning.Absence in the scripts' whole µs: a
// minute, or 30 lease TTLs if longer.
func absenceUS(r *rules.Rule) int64 {
	return max(time.Minute.Microseconds(), 30*r.Lease.TTL.Microseconds())
}

// maxWaitUS caps every computed wait and lifetime (~35.7 years). A token
// bucket with a large burst and a tiny rate (say burst 1e6, 1 token a year)
// would otherwise need more microseconds than an int64 holds: the conversion
// overflows to a negative expiry, the state resets on every call and the rule
// stops limiting. The cap also keeps every instant below 2^53, exact in Lua.
const maxWaitUS = 1 << 50

func ceilUS(f float64) int64 { return int64(math.Min(math.Ceil(f), maxWaitUS)) }

// ratePerSecond is the rule's rate in tokens per second, computed as the
// scripts compute it.
func ratePerSecond(r *rules.Rule) float64 { return float64(r.Limit) * 1e6 / float64(periodUS(r)) }

// sortedSum adds xs in ascending order, so that the scripts, which meet the
// holders in another order, reach the same float.
func sortedSum(xs []float64) float64 {
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum
}

// acquire grants one lease. consumed is debited first, in full however late
// it is reported (docs/design.md, guarantee 4): a bucket's debt is repaid by refill,
// never forgiven, or the tokens a node admitted on its fallback would be
// admitted again by the rest of the fleet; what the store reserved for the
// node while it was absent covers its part (core_absence.go). What one
// report can debit is bounded by what the node's fallback allowance could have
// admitted (capConsumed). A window takes consumption that began in it, up
// to 2x its limit; what began in a window that has ended is dropped with
// that window.
func (st *state) acquire(r *rules.Rule, now int64, req *AcquireRequest) Lease {
	ttl := r.Lease.TTL.Microseconds()
	if r.IsConcurrency() {
		return st.slots.acquire(r, now, req, &st.expires)
	}
	if !r.Leasable() {
		return st.report(r, now, ttl, req)
	}
	if l, ok := st.replay(r, now, ttl, req); ok {
		return l
	}
	var l Lease
	switch r.Algorithm {
	case rules.TokenBucket:
		l = st.acquireBucket(r, now, ttl, req)
	default:
		l = st.acquireWindow(r, now, ttl, req)
	}
	if req.Seq > 0 {
		h := st.holders[req.Node]
		h.seq, h.granted = req.Seq, l.Granted
		st.holders[req.Node] = h
	}
	return l
}

// replay answers again the request a holder last sent, whose answer was
// lost: the same tokens and share, nothing applied twice (no consumption
// debited, no return credited, no grant), and the state left as it is.
// The lease's life runs from when the request was applied.
func (st *state) replay(r *rules.Rule, now, ttl int64, req *AcquireRequest) (Lease, bool) {
	h, ok := st.holders[req.Node]
	if req.Seq == 0 || !ok || h.seq != req.Seq || h.until <= now {
		return Lease{}, false
	}
	l := Lease{Granted: h.granted, Rate: h.rate, TTL: us(ttl), FallbackNodes: max(h.n, 1)}
	a := absenceUS(r)
	for _, o := range st.holders {
		if o.known(now, a) {
			l.Holders++
		}
	}
	applied := h.until - ttl
	switch r.Algorithm {
	case rules.TokenBucket:
		l.Remaining = int64(math.Floor(math.Max(st.bucket.tokens, 0)))
	default:
		p := periodUS(r)
		l.Epoch = applied / p
		l.Remaining = int64(math.Floor(math.Max(float64(r.Limit)-st.window.count, 0)))
		// Tokens of a window die with it, counted from the apply.
		l.TTL = us(max(min(ttl, (l.Epoch+1)*p-applied), 0))
	}
	return l, true
}

// report debits what a node admitted under a strict rule from its fallback
// share while the allocator could not decide: nothing is lent, the node is
// not counted as a holder, and the debit is bounded as an Acquire's
// consumed is (a log takes entries up to its limit). It also takes what the
// rule's settled reservations cost beyond their estimate (core_debt.go).
func (st *state) report(r *rules.Rule, now, ttl int64, req *AcquireRequest) Lease {
	l := Lease{TTL: us(ttl)}
	consumed := st.capConsumed(r, req.Node, now, req.Consumed, req.ConsumedAge)
	switch r.Algorithm {
	case rules.TokenBucket:
		st.refill(r, now)
		st.bucket.debit(float64(consumed))
		st.bucket.settle(r, req.Settled)
		l.Remaining = int64(math.Floor(math.Max(st.bucket.tokens, 0)))
		st.expires = st.bucketExpiry(r, now, ttl)
	case rules.SlidingLog:
		st.reportLog(r, now, req)
		l.Remaining = r.Limit - st.log.count()
	default:
		_, start, end, at := st.window.roll(r, now)
		st.window.debit(r, consumed, req.ConsumedAge, at, start)
		st.window.settle(r, req.Settled)
		l.Remaining = int64(math.Floor(math.Max(float64(r.Limit)-st.window.count, 0)))
		st.expires = start + 2*periodUS(r) + ttl
		if r.Algorithm == rules.FixedWindow {
			st.expires = end + ttl
		}
		st.expires = max(st.expires, st.keptUntil(r))
	}
	return l
}

// release credits returned tokens (never above what the node holds, never
// above capacity, never into a window that has ended) and forgets the node
// as a holder, ending its share: the refill first counts the share up to
// now.
func (st *state) release(r *rules.Rule, now int64, ret *Return) {
	ttl := r.Lease.TTL.Microseconds()
	switch r.Algorithm {
	case rules.Concurrency:
		st.slots.release(now, ret.Node, &st.expires)
	case rules.TokenBucket:
		credited, _ := st.giveBack(ret.Node, now, ttl, 0, ret.Tokens, reportOf(ret.Held, ret.HeldKnown))
		// Refilled while it still holds: until now its share was its own,
		// and what it held the bucket had lent.
		st.refill(r, now)
		delete(st.holders, ret.Node)
		st.bucket.tokens = math.Min(st.ceiling(r, now, "", 0), st.bucket.tokens+float64(credited))
	case rules.FixedWindow, rules.SlidingWindow:
		credited, _ := st.giveBack(ret.Node, now, ttl, ret.Epoch, ret.Tokens, reportOf(ret.Held, ret.HeldKnown))
		delete(st.holders, ret.Node)
		epoch, _, _, _ := st.window.roll(r, now)
		st.window.credit(r, epoch, credited, ret.Epoch)
	}
}

// check decides one request of cost tokens, which the caller has checked
// against the capacity.
func (st *state) check(r *rules.Rule, now, cost int64) Decision {
	switch r.Algorithm {
	case rules.TokenBucket:
		return st.checkBucket(r, now, cost)
	case rules.SlidingLog:
		return st.checkLog(r, now, cost)
	default:
		return st.checkWindow(r, now, cost)
	}
}
