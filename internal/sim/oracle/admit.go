package oracle

import "time"

// logHorizon is how many periods of the store's clock a sliding log's
// check remembers below the latest admission: a store clock stepped back
// further is checked against what is kept (Checked.BeyondHorizon).
const logHorizon = 8

// Admitted records a request the fleet let through: at is true time,
// storeAt the store's clock at that instant (for a strict rule decided
// centrally, the store's clock when it decided), mode how it was decided.
// It checks every bound the admission takes part in.
//
// A Fallback admission is reserved when node held a lease on the key (a
// grant of tokens or a share) whose latest end, delivery + ttl, is within
// the rule's Absence before at, and has not released the key since; every
// other fallback admission, and every one of a strict rule, is unreserved.
// Unreserved admissions are left out of the fleet's sums and held to the
// node's own fallback bound (docs/bounds.md, "Gaps, said") only while a
// fault may keep the allocator from it (one is recorded from at most a TTL
// before at): a node that falls back while nothing is wrong has no excuse,
// and what it admits counts in the fleet's sums like any admission.
func (o *Oracle) Admitted(at, storeAt time.Duration, node int, rule, key string, cost int64, mode Mode) {
	o.admit(at, storeAt, node, rule, key, cost, mode, admission)
}

// spending is what an admit records: an admission, or the extra cost of a
// request settled after its work.
type spending uint8

const (
	admission spending = iota
	settlement
)

func (o *Oracle) admit(at, storeAt time.Duration, node int, rule, key string, cost int64, mode Mode, what spending) {
	settled := what == settlement
	if !o.tick(at, "admission", rule, key) {
		return
	}
	if mode < Lease || mode > Strict || cost < 0 {
		o.usage(at, rule, key, "admission by node %d of cost %d in mode %v", node, cost, mode)
		return
	}
	ks := o.key(at, rule, key)
	if ks == nil {
		return
	}
	v, ns := ks.rs.cur(), ks.node(node)
	ev := traceEv{kind: evAdmitted, mode: mode, node: node, n: cost, at: at, store: storeAt}
	if settled {
		ev.kind = evSettled
		o.checked.Settled++
		o.checked.SettledTokens += cost
	} else {
		o.checked.Admitted++
	}
	unreserved := false
	switch {
	case settled: // (not a lease's spend that the returns check counts: a debt may go to the store)
	case mode == Lease:
		o.checked.Lease++
		ns.spent += cost
	case mode == Strict:
		o.checked.Strict++
	case mode == Fallback:
		o.checked.Fallback++
	}
	if mode == Fallback {
		ev.class = 1
		if (v.Strict || !ns.reserved(at, v.Absence)) && o.faulty(rule, at) {
			ev.class, unreserved = 2, true
			o.checked.Unreserved++
		}
	}
	ks.trace.push(ev)
	if v.FailClosed {
		if mode == Fallback {
			o.breach(ks, Violation{Invariant: InvClosed, Node: node, From: at, To: at, At: at,
				Measured: float64(cost)}, record{})
		} else {
			ks.pass(InvClosed, node)
		}
	}
	vlo := ks.rs.lookback(at)
	if v.Algorithm == FixedWindow || v.Algorithm == SlidingWindow {
		// The store never goes back in its windows: a clock stepped back
		// keeps the later window it decided in and decides at its start.
		// Only what the store decided moves that window on (StoreDecided):
		// an admission's instant on the store's clock is one the store may
		// never have decided at. A fallback's, cut off from the allocator
		// through a window that its clock, stepped back, then counts again
		// from an earlier one (seed 44553); a lease's, spending what the
		// store lent before its clock stepped forward, in a window it never
		// decided in before stepping back (seed 98100). (A log is judged on
		// the raw clock: its decisions reach the oracle out of the store's
		// order, a round trip late; stepped back, it keeps its entries, and
		// a period the step spans is held to twice its limit: see
		// admitLog.)
		storeAt = max(storeAt, ks.storeMax)
	}
	switch v.Algorithm {
	case TokenBucket:
		o.admitBucket(ks, ns, node, at, cost, vlo, unreserved)
	case FixedWindow, SlidingWindow:
		var off time.Duration
		if mode == Fallback {
			off = o.misplaced(node, at, v.Period)
		}
		o.admitWindow(ks, ns, node, at, storeAt, cost, vlo, unreserved, off)
	case SlidingLog:
		o.admitLog(ks, ns, node, at, storeAt, cost, vlo, unreserved)
	}
	if !settled {
		ks.acc.admitted += cost
		o.countFair(ks, at, node, cost)
	}
}

func (o *Oracle) admitBucket(ks *keyState, ns *nodeState, node int, at time.Duration, cost int64, vlo int, unreserved bool) {
	if unreserved {
		if ns.fbBucket == nil {
			ns.fbBucket = &rateBound{}
		}
		o.judgeRate(ks, InvFallbackBucket, node, at, ns.fbBucket.admit(ks.rs, o.n, float64(at), cost, vlo))
		return
	}
	c := &ks.checks
	if c.bucket == nil {
		c.bucket = &rateBound{}
		c.second = newWindowSum(ks.rs, boundSecond, o.fleet, time.Second, time.Second, bothEnds)
	}
	o.judgeRate(ks, InvBucket, -1, at, c.bucket.admit(ks.rs, 0, float64(o.stepped(ks, at)), cost, vlo))
	sv := c.second.add(at, cost, vlo)
	switch {
	case sv.ok:
		ks.pass(InvBucketSecond, -1)
	case o.calm(ks.id.rule, at-time.Second, sv.from, time.Second):
		// Some 1-s window holding these admissions is calm, as far as the
		// faults known now tell.
		o.breach(ks, Violation{Invariant: InvBucketSecond, Node: -1, From: sv.from, To: sv.to, At: at,
			Measured: float64(sv.sum), Bound: sv.bound}, record{calm: true, sLo: at - time.Second, sHi: sv.from})
	}
}

func (o *Oracle) judgeRate(ks *keyState, inv Invariant, node int, at time.Duration, vd rateVerdict) {
	if vd.ok {
		ks.pass(inv, node)
		return
	}
	o.breach(ks, Violation{Invariant: inv, Node: node, From: time.Duration(vd.from), To: time.Duration(vd.to), At: at,
		Measured: vd.measured, Bound: vd.boundVal}, record{})
}

func (o *Oracle) admitWindow(ks *keyState, ns *nodeState, node int, at, storeAt time.Duration, cost int64, vlo int, unreserved bool, misplaced time.Duration) {
	p := ks.rs.cur().Period
	if unreserved {
		if ns.fbCounts == nil {
			ns.fbCounts = newWindowCounts(ks.rs, boundNodeLimit, o.n, p)
		}
		o.judgeCount(ks, InvFallbackWindow, node, at, p, ns.fbCounts.add(storeAt, cost, vlo, misplaced))
		return
	}
	c := &ks.checks
	if c.counts == nil {
		c.counts = newWindowCounts(ks.rs, boundLimit, o.n, p)
		c.counts.forward = &o.forward
	}
	o.judgeCount(ks, InvWindow, -1, at, p, c.counts.add(storeAt, cost, vlo, misplaced))
	if ks.rs.cur().Algorithm != SlidingWindow {
		return
	}
	if c.twice == nil {
		c.twice = newWindowSum(ks.rs, boundTwice, o.n, p, p, openEnd)
	}
	wv := c.twice.add(at, cost, vlo)
	if !wv.ok && float64(wv.sum) <= 1.5*wv.bound && o.steppedAhead(wv.from-ks.rs.maxTTL, wv.to) {
		// What the store lent before a step forward may be spent after
		// it, beside two windows of its later clock: P of true time that
		// a step forward falls in (or a TTL after it) may see three
		// limits (docs/bounds.md, "A store clock stepped").
		wv.ok = true
	}
	o.judgeSum(ks, InvSlidingTwice, -1, at, false, wv)
}

func (o *Oracle) judgeCount(ks *keyState, inv Invariant, node int, at, p time.Duration, cv countVerdict) {
	switch {
	case cv.beyond:
		o.checked.BeyondHorizon++
	case cv.ok:
		ks.pass(inv, node)
	default:
		o.breach(ks, Violation{Invariant: inv, Node: node, From: time.Duration(cv.k) * p, To: time.Duration(cv.k+1) * p,
			StoreTime: true, At: at, Measured: float64(cv.sum), Bound: cv.bound}, record{})
	}
}

func (o *Oracle) admitLog(ks *keyState, ns *nodeState, node int, at, storeAt time.Duration, cost int64, vlo int, unreserved bool) {
	p := ks.rs.cur().Period
	if unreserved {
		if ns.fbLog == nil {
			ns.fbLog = newWindowSum(ks.rs, boundNodeLimit, o.n, p, p, openEnd)
		}
		o.judgeSum(ks, InvFallbackLog, node, at, false, ns.fbLog.add(at, cost, vlo))
		return
	}
	c := &ks.checks
	if c.log == nil {
		c.log = newWindowSum(ks.rs, boundLimit, o.n, p, logHorizon*p, openEnd)
	}
	// The store keeps its log in whole microseconds (Redis TIME): a
	// period is judged on that clock, or a request a store dropped at
	// exactly a period would count here a few hundred ns inside it.
	wv := c.log.add(storeAt.Truncate(time.Microsecond), cost, vlo)
	if !wv.ok && float64(wv.sum) <= 2*wv.bound && o.stepSpans(wv.from, wv.to+p) {
		// A log stepped back forgot, before the step, the entries a period
		// older than its clock read then: a period of its clock the step
		// spans may see its limit twice (docs/bounds.md, "A store clock
		// stepped").
		wv.ok = true
	}
	o.judgeSum(ks, InvLog, -1, at, true, wv)
}

func (o *Oracle) judgeSum(ks *keyState, inv Invariant, node int, at time.Duration, store bool, wv windowVerdict) {
	if wv.beyond {
		o.checked.BeyondHorizon++
	}
	if wv.ok {
		ks.pass(inv, node)
		return
	}
	o.breach(ks, Violation{Invariant: inv, Node: node, From: wv.from, To: wv.to, StoreTime: store, At: at,
		Measured: float64(wv.sum), Bound: wv.bound}, record{})
}
