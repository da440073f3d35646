package oracle

import (
	"fmt"
	"strings"
	"time"
)

// Invariant names a checked property (docs/simulation.md states each).
type Invariant string

// The invariants.
const (
	// InvBucket: a token bucket's fleet admits A[t1, t2] ≤ b + r·(T + L).
	InvBucket Invariant = "bucket"
	// InvBucketSecond: a token bucket's calm A[t, t+1 s] ≤ b + 1.1·r.
	InvBucketSecond Invariant = "bucket-1s"
	// InvWindow: a fixed or sliding window's store window admits ≤ l.
	InvWindow Invariant = "window"
	// InvSlidingTwice: a sliding window admits ≤ 2·l in any P of true time.
	InvSlidingTwice Invariant = "sliding-2l"
	// InvLog: a sliding log admits ≤ l in any P of the store's clock.
	InvLog Invariant = "log"
	// InvClosed: a failure: closed rule admits nothing on fallback.
	InvClosed Invariant = "closed-fallback"
	// InvReturns: a node gives back no more than it held unspent.
	InvReturns Invariant = "returns"
	// InvFallbackBucket: one node's unreserved fallback on a token bucket
	// admits A[t1, t2] ≤ ⌈b/N⌉ + 1 + (r/N)·T.
	InvFallbackBucket Invariant = "fallback-bucket"
	// InvFallbackWindow: one node's unreserved fallback admits ≤ ⌈l/N⌉ per
	// store window.
	InvFallbackWindow Invariant = "fallback-window"
	// InvFallbackLog: one node's fallback on a sliding log admits ≤ ⌈l/N⌉
	// in any P of true time.
	InvFallbackLog Invariant = "fallback-log"
	// InvSlots: a concurrency rule's slots in flight, fleet-wide, with a
	// crashed node's until its lease ends, ≤ l + ⌊l/N⌋ for each node
	// with slots of its fallback taken while a fault excused it.
	InvSlots Invariant = "slots"
	// InvSlotsNode: one node's slots of its fallback in flight ≤ ⌊l/N⌋.
	InvSlotsNode Invariant = "fallback-slots"
	// InvFairness: equal demand gets admissions within ±10% of the mean.
	InvFairness Invariant = "fairness"
	// InvUsage: the oracle was fed something it cannot judge (an event out
	// of time order, an unknown rule, a fairness interval already begun).
	InvUsage Invariant = "usage"
)

// Violation is one broken invariant: the first breach of an episode (the
// checks that failed in a row for one invariant, key and node), with the
// count of those that followed.
type Violation struct {
	Invariant Invariant
	Rule, Key string
	Node      int // the node, or -1 for the fleet
	// From and To are the window: what was admitted in [From, To] broke
	// the bound. StoreTime says they are on the store's clock (the store
	// window [From, To) of a window rule, a sliding log's window).
	From, To  time.Duration
	StoreTime bool
	At        time.Duration // the true time of the event that broke it
	Measured  float64       // what was admitted (returned, for InvReturns)
	Bound     float64       // the bound with its tolerances: Measured > Bound
	Repeats   int           // further breaches of the same episode
	Detail    string        // for InvUsage and InvFairness, what was wrong
	Trace     []string      // the key's last events, the breaking one last
}

// String is the violation on one line, then its trace, a line an event.
func (v Violation) String() string {
	var b strings.Builder
	if v.Invariant == InvUsage {
		fmt.Fprintf(&b, "%s: rule %s key %q at %v: %s", v.Invariant, v.Rule, v.Key, v.At, v.Detail)
		return b.String()
	}
	who := "fleet"
	if v.Node >= 0 {
		who = fmt.Sprintf("node %d", v.Node)
	}
	clock := ""
	if v.StoreTime {
		clock = " store"
	}
	fmt.Fprintf(&b, "%s: rule %s key %q %s at %v: window [%v, %v]%s: %g > %g",
		v.Invariant, v.Rule, v.Key, who, v.At, v.From, v.To, clock, v.Measured, v.Bound)
	if v.Repeats > 0 {
		fmt.Fprintf(&b, " (and %d more)", v.Repeats)
	}
	if v.Detail != "" {
		b.WriteString(": " + v.Detail)
	}
	for _, l := range v.Trace {
		b.WriteString("\n    " + l)
	}
	return b.String()
}

// maxRecords caps the violations kept; the rest are counted.
const maxRecords = 10_000

// record is a violation as kept: a calm one (InvBucketSecond) also keeps
// the starts of the 1-s windows that hold its admissions, [sLo, sHi]; it
// stands unless a fault excuses every one of them.
type record struct {
	v        Violation
	calm     bool
	sLo, sHi time.Duration
}

// episode is an open run of breaches of one invariant for one node (-1:
// the fleet) of a key: further breaches fold into record idx until a check
// of it passes.
type episode struct {
	inv  Invariant
	node int
	idx  int
}

// breach records v for key ks unless it continues an open episode. A calm
// record that a fault now excuses gives its place to the new one.
func (o *Oracle) breach(ks *keyState, v Violation, rec record) {
	for i := range ks.open {
		e := &ks.open[i]
		if e.inv != v.Invariant || e.node != v.Node {
			continue
		}
		if old := &o.recs[e.idx]; !old.calm || !o.excused(old) {
			old.v.Repeats++
			return
		}
		ks.open = append(ks.open[:i], ks.open[i+1:]...)
		break
	}
	if len(o.recs) >= maxRecords {
		o.dropped++
		return
	}
	v.Rule, v.Key = ks.id.rule, ks.id.key
	v.Trace = ks.trace.lines()
	rec.v = v
	o.recs = append(o.recs, rec)
	ks.open = append(ks.open, episode{inv: v.Invariant, node: v.Node, idx: len(o.recs) - 1})
	if o.cfg.Trace != nil {
		o.cfg.Trace("oracle: " + v.String())
	}
}

// pass closes the open episode of inv for node, if any.
func (ks *keyState) pass(inv Invariant, node int) {
	for i, e := range ks.open {
		if e.inv == inv && e.node == node {
			ks.open = append(ks.open[:i], ks.open[i+1:]...)
			return
		}
	}
}

// usage records an event the oracle cannot judge.
func (o *Oracle) usage(at time.Duration, rule, key string, format string, args ...any) {
	if len(o.recs) >= maxRecords {
		o.dropped++
		return
	}
	v := Violation{Invariant: InvUsage, Rule: rule, Key: key, Node: -1, At: at, Detail: fmt.Sprintf(format, args...)}
	o.recs = append(o.recs, record{v: v})
	if o.cfg.Trace != nil {
		o.cfg.Trace("oracle: " + v.String())
	}
}

// Violations is every violation found so far, in the order found, less the
// calm ones that the faults recorded since excuse.
func (o *Oracle) Violations() []Violation {
	var out []Violation
	for i := range o.recs {
		if r := &o.recs[i]; !r.calm || !o.excused(r) {
			out = append(out, r.v)
		}
	}
	return out
}
