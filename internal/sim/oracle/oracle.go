package oracle

import (
	"fmt"
	"time"
)

// Config sets an Oracle up.
type Config struct {
	// Nodes is the fleet size N the world runs: the N a node that knows
	// its fleet divides the rule by for its fallback. Below 1 means 1.
	Nodes int
	// Fleet is how many nodes the world runs (Nodes, if 0): a token
	// bucket's calm second may take one token more per node, the fraction of
	// a token a share split below a token a node carries into it (see
	// docs/simulation.md).
	Fleet int
	// CallTimeout is the longest a node waits on one call to the
	// allocator: a decision whose call went out into a fault falls back
	// when the call times out, which may be after the fault has ended.
	CallTimeout time.Duration
	// Trace, when set, receives one line for every violation as it is
	// found (a calm one may be withdrawn later, see Fault) and for every
	// rule change and fault.
	Trace func(string)
}

// Oracle judges one run. Feed it events in the order of true time (Fault,
// Cut and ExpectFair excepted); an event earlier than the one before is a
// usage violation and is not judged.
type Oracle struct {
	forward []storeStep // the store clock's steps forward
	// heard is when each node last received a window rule's grant: a node
	// cut off since before a store clock step counts its fallback in
	// misplaced windows. (A token bucket's grant names no window: the node
	// learns nothing of the store's clock from it; seed 52685.)
	heard   map[int]time.Duration
	fleet   int // the world's fleet: the calm second's rounding term
	cfg     Config
	n       int
	now     time.Duration
	rules   map[string]*ruleState
	keys    map[keyID]*keyState
	faults  []fault // by from
	recs    []record
	dropped int
	fair    []fairWin
	checked Checked
	done    bool            // Finish has judged the fairness intervals
	slots   slotState       // concurrency rules (slots.go)
	owed    map[keyID]int64 // what settling callers owe at once (settle.go)
}

type keyID struct{ rule, key string }

// keyState is everything the oracle keeps for one (rule, key).
type keyState struct {
	id     keyID
	rs     *ruleState
	epoch  int
	trace  ring
	open   []episode
	nodes  map[int]*nodeState
	checks checks // the epoch's bounds
	acc    accuracy
	fair   []int // indices in Oracle.fair
	// storeMax is the latest store time the store decided on the key at
	// (StoreDecided): windows are counted on the store's clock as the
	// store counts them, never going back.
	storeMax time.Duration
}

// checks are the fleet's bounds of one key in one epoch; the ones its
// algorithm has are set.
type checks struct {
	bucket *rateBound    // token bucket: b + r·(T + L)
	second *windowSum    // token bucket, calm: b + 1.1·r over 1 s
	counts *windowCounts // windows: l per store window
	twice  *windowSum    // sliding window: 2·l over P of true time
	log    *windowSum    // sliding log: l over P of the store's clock
}

// nodeState is one node's account of a key and the bounds of its
// unreserved fallback in the current epoch.
type nodeState struct {
	holder
	epoch    int
	fbBucket *rateBound
	fbCounts *windowCounts
	fbLog    *windowSum
}

// New returns an Oracle for a fleet of cfg.Nodes nodes.
func New(cfg Config) *Oracle {
	fleet := cfg.Fleet
	if fleet <= 0 {
		fleet = max(cfg.Nodes, 1)
	}
	return &Oracle{cfg: cfg, n: max(cfg.Nodes, 1), fleet: fleet, rules: map[string]*ruleState{}, keys: map[keyID]*keyState{}}
}

// tick moves the oracle's clock to at, or says the event is out of order.
func (o *Oracle) tick(at time.Duration, what, rule, key string) bool {
	if at < o.now {
		o.usage(at, rule, key, "%s at %v after an event at %v", what, at, o.now)
		return false
	}
	o.now = at
	return true
}

// SetRule puts r in force from at: before the first event of the rule, and
// again at a reload. A window spanning a reload is held to the largest of
// the bounds of the versions its admissions may have drawn on. A reload
// that changes the algorithm, or the period of a window rule or a log,
// starts the rule's bounds afresh: their windows cannot be compared.
func (o *Oracle) SetRule(at time.Duration, r Rule) {
	if !o.tick(at, "rule", r.Name, "") {
		return
	}
	nr, err := r.normalize()
	if err != nil {
		o.usage(at, r.Name, "", "%v", err)
		return
	}
	rs := o.rules[nr.Name]
	if rs == nil {
		rs = &ruleState{}
		o.rules[nr.Name] = rs
	}
	rs.set(at, nr)
	o.checked.Rules++
	if o.cfg.Trace != nil {
		o.cfg.Trace(fmt.Sprintf("oracle: %v rule %s: %v limit %d per %v burst %d ttl %v", at, nr.Name, nr.Algorithm, nr.Limit, nr.Period, nr.Burst, nr.TTL))
	}
}

// Spreading says the version of rule just set reaches the nodes one at a
// time, as rules fetched on a refresh do: until Learned says every node
// has it, a node may still decide under an older version, and every window
// is held to the largest bounds among the versions still in force. It
// returns the version's number, for Learned.
func (o *Oracle) Spreading(rule string) int {
	rs := o.rules[rule]
	if rs == nil {
		o.usage(o.now, rule, "", "spreading an unknown rule")
		return 0
	}
	return rs.spreading()
}

// Learned says every node decides under version ver of rule (or a later
// one) from at.
func (o *Oracle) Learned(at time.Duration, rule string, ver int) {
	if !o.tick(at, "learned", rule, "") {
		return
	}
	if rs := o.rules[rule]; rs != nil {
		rs.learned(at, ver)
	} else {
		o.slotLearned(at, rule)
	}
}

// key is the state of (rule, key), made afresh for a new epoch of the
// rule; nil (and a usage violation) for a rule never set.
func (o *Oracle) key(at time.Duration, rule, key string) *keyState {
	id := keyID{rule, key}
	ks := o.keys[id]
	if ks == nil {
		rs := o.rules[rule]
		if rs == nil {
			o.usage(at, rule, key, "an event of a rule never set")
			return nil
		}
		ks = &keyState{id: id, rs: rs, epoch: -1}
		o.keys[id] = ks
	}
	if e := ks.rs.cur().epoch; e != ks.epoch {
		ks.epoch, ks.checks, ks.open = e, checks{}, nil
		ks.acc.reset()
	}
	return ks
}

// node is node's state of ks, its fallback bounds made afresh for a new
// epoch.
func (ks *keyState) node(node int) *nodeState {
	if ks.nodes == nil {
		ks.nodes = map[int]*nodeState{}
	}
	ns := ks.nodes[node]
	if ns == nil {
		ns = &nodeState{epoch: ks.epoch}
		ks.nodes[node] = ns
	}
	if ns.epoch != ks.epoch {
		ns.epoch, ns.fbBucket, ns.fbCounts, ns.fbLog = ks.epoch, nil, nil, nil
	}
	return ns
}

// Offered records a request node received for (rule, key), admitted or
// not: the demand the accuracy's ideal is fed.
func (o *Oracle) Offered(at time.Duration, node int, rule, key string, cost int64) {
	if !o.tick(at, "offered", rule, key) {
		return
	}
	if ks := o.key(at, rule, key); ks != nil {
		o.checked.Offered++
		ks.acc.offer(ks.rs.cur(), at, cost)
	}
}

// StoreDecided records that the store decided on key at at, its clock
// reading storeAt: it applied a request, a return or a check, which move a
// window rule's window on to the one of storeAt, and never back (a window
// rule's admissions are counted in that window or a later one). A request
// answered again (its retry, by its sequence number) decides nothing.
func (o *Oracle) StoreDecided(at, storeAt time.Duration, rule, key string) {
	if o.rules[rule] == nil || !o.tick(at, "store decision", rule, key) {
		return
	}
	ks := o.key(at, rule, key)
	if a := ks.rs.cur().Algorithm; a == FixedWindow || a == SlidingWindow {
		ks.storeMax = max(ks.storeMax, storeAt)
	}
}

// Granted records a lease answer delivered to node at at, for a request it
// sent at sentAt: tokens now and a share of rate tokens/s, for ttl.
func (o *Oracle) Granted(at, sentAt time.Duration, node int, rule, key string, tokens int64, rate float64, ttl time.Duration) {
	if !o.tick(at, "grant", rule, key) {
		return
	}
	if sentAt > at || tokens < 0 || rate < 0 || ttl < 0 {
		o.usage(at, rule, key, "grant to node %d sent at %v of %d + %g/s for %v", node, sentAt, tokens, rate, ttl)
		return
	}
	ks := o.key(at, rule, key)
	if ks == nil {
		return
	}
	o.checked.Granted++
	if ks.rs.cur().Algorithm != TokenBucket {
		if o.heard == nil {
			o.heard = make(map[int]time.Duration)
		}
		o.heard[node] = at
	}
	ks.node(node).grant(at, sentAt, tokens, rate, ttl)
	ks.trace.push(traceEv{kind: evGranted, node: node, n: tokens, at: at, store: sentAt, ttl: ttl, rate: rate})
}

// Returned records tokens node gave back at at (with an Acquire or a
// Release) and checks them against what it held unspent (holder).
func (o *Oracle) Returned(at time.Duration, node int, rule, key string, tokens int64) {
	if !o.tick(at, "return", rule, key) {
		return
	}
	ks := o.key(at, rule, key)
	if ks == nil {
		return
	}
	o.checked.Returned++
	ks.trace.push(traceEv{kind: evReturned, node: node, n: tokens, at: at})
	ns := ks.node(node)
	ns.returned += tokens
	if tokens <= 0 {
		return
	}
	if bd := ns.held() + 1; exceeds(float64(ns.returned), bd) {
		o.breach(ks, Violation{Invariant: InvReturns, Node: node, From: 0, To: at, At: at,
			Measured: float64(ns.returned), Bound: bd}, record{})
	} else {
		ks.pass(InvReturns, node)
	}
}

// Released records that node released (rule, key): it is no longer a
// holder (its fallback is no longer reserved).
func (o *Oracle) Released(at time.Duration, node int, rule, key string) {
	if !o.tick(at, "release", rule, key) {
		return
	}
	ks := o.key(at, rule, key)
	if ks == nil {
		return
	}
	o.checked.Released++
	ns := ks.node(node)
	ns.release()
	ns.freshFallback()
	ks.trace.push(traceEv{kind: evReleased, node: node, at: at})
}

// Restarted records that node started again at at, with nothing of what it
// held: as after a release, its next fallback on any key is on a fresh
// allowance (docs/bounds.md, "Gaps, said"). Whether the store reserves it
// is unchanged: it keeps the node as an absent holder.
func (o *Oracle) Restarted(at time.Duration, node int) {
	if !o.tick(at, "restart", "", "") {
		return
	}
	for _, ks := range o.keys {
		if ns := ks.nodes[node]; ns != nil {
			ns.freshFallback()
			// The new process holds nothing: until it is granted a lease,
			// its fallback is on a fresh allowance the store keeps nothing
			// for (the store may still reserve for its former self).
			ns.release()
		}
	}
}

// freshFallback starts the bounds of the node's unreserved fallback afresh:
// a node that gave the key back, or restarted, falls back on a fresh
// allowance (b/N, then r/N; l/N a window), which the store does not know of.
func (ns *nodeState) freshFallback() { ns.fbBucket, ns.fbCounts, ns.fbLog = nil, nil, nil }
