package oracle

import (
	"fmt"
	"time"
)

// Concurrency rules: the oracle counts the slots in flight, fleet-wide and
// per node, from the world's Took and Gave (its own count of handlers
// running, never Allot's), and holds them at every instant to what
// docs/bounds.md ("Concurrency") promises (docs/simulation.md states it).

// SlotRule is what the oracle knows of a concurrency rule: its fields.
type SlotRule struct {
	Name  string
	Limit int64 // slots in flight, fleet-wide: l
	// TTL is the lease TTL L; MaxHold how long a slot taken on a lease
	// stays covered by it (H). Both must be set.
	TTL, MaxHold time.Duration
	FailClosed   bool
}

// slotVer is one version of a slot rule, in force until gone (its
// successor learned by every node) + its TTL and max_hold: the slots
// leased under it drain by then.
type slotVer struct {
	SlotRule
	gone time.Duration
}

type slotRuleState struct{ vers []slotVer }

// limit is the largest limit among the versions in force at at.
func (s *slotRuleState) limit(at time.Duration) int64 {
	var l int64
	for i, v := range s.vers {
		if i == len(s.vers)-1 || v.gone == forever || at < v.gone+v.TTL+v.MaxHold {
			l = max(l, v.Limit)
		}
	}
	return l
}

func (s *slotRuleState) cur() *slotVer { return &s.vers[len(s.vers)-1] }

// slotKey is one (rule, key)'s slots in flight.
type slotKey struct {
	id    keyID
	rs    *slotRuleState
	nodes map[int]*slotNode
	// ghosts are a crashed node's lease slots, counted until its lease
	// ends: the store holds them until then.
	ghosts []ghost
	trace  ring
	open   []episode
	// busy is the slot-time used since the first take, in slot·ns, and
	// since, last when in flight last changed.
	busy        float64
	first, last time.Duration
	inFlight    int64 // live slots, every mode
}

type slotNode struct {
	lease, fallback int64 // in flight, by mode
	excused         int64 // of fallback, taken while a fault may keep it from the allocator
	ends            time.Duration
}

type ghost struct {
	node  int
	n     int64
	until time.Duration
}

type slotState struct {
	rules map[string]*slotRuleState
	keys  map[keyID]*slotKey
}

// SetSlotRule puts the concurrency rule r in force from at (at the start,
// and at each reload: the versions before it stay in force until Learned,
// plus their TTL and max_hold).
func (o *Oracle) SetSlotRule(at time.Duration, r SlotRule) {
	if !o.tick(at, "slot rule", r.Name, "") {
		return
	}
	if r.Name == "" || r.Limit <= 0 || r.TTL <= 0 || r.MaxHold <= 0 || r.MaxHold >= r.TTL {
		o.usage(at, r.Name, "", "slot rule %+v", r)
		return
	}
	if o.slots.rules == nil {
		o.slots = slotState{rules: map[string]*slotRuleState{}, keys: map[keyID]*slotKey{}}
	}
	rs := o.slots.rules[r.Name]
	if rs == nil {
		rs = &slotRuleState{}
		o.slots.rules[r.Name] = rs
	}
	rs.vers = append(rs.vers, slotVer{SlotRule: r, gone: forever})
	o.checked.Rules++
}

// slotLearned says every node has rule's latest version from at.
func (o *Oracle) slotLearned(at time.Duration, rule string) bool {
	rs := o.slots.rules[rule]
	if rs == nil {
		return false
	}
	for i := range len(rs.vers) - 1 {
		if rs.vers[i].gone == forever {
			rs.vers[i].gone = at
		}
	}
	return true
}

func (o *Oracle) slotKey(at time.Duration, rule, key string) *slotKey {
	id := keyID{rule, key}
	if sk := o.slots.keys[id]; sk != nil {
		return sk
	}
	rs := o.slots.rules[rule]
	if rs == nil {
		o.usage(at, rule, key, "a slot of a rule never set")
		return nil
	}
	sk := &slotKey{id: id, rs: rs, nodes: map[int]*slotNode{}, first: at, last: at}
	o.slots.keys[id] = sk
	return sk
}

func (sk *slotKey) node(n int) *slotNode {
	sn := sk.nodes[n]
	if sn == nil {
		sn = &slotNode{}
		sk.nodes[n] = sn
	}
	return sn
}

// account adds the slot-time since the last change.
func (sk *slotKey) account(at time.Duration) {
	sk.busy += float64(sk.inFlight) * float64(at-sk.last)
	sk.last = at
}

// Took records a slot node took at at, on its lease (Lease) or its
// fallback (Fallback), and checks the bounds.
func (o *Oracle) Took(at time.Duration, node int, rule, key string, m Mode) {
	if !o.tick(at, "took", rule, key) {
		return
	}
	sk := o.slotKey(at, rule, key)
	if sk == nil {
		return
	}
	if m != Lease && m != Fallback {
		o.usage(at, rule, key, "a slot taken in mode %v", m)
		return
	}
	sk.account(at)
	sk.inFlight++
	sn := sk.node(node)
	o.checked.Admitted++
	if m == Lease {
		o.checked.Lease++
		sn.lease++
	} else {
		o.checked.Fallback++
		sn.fallback++
		if o.slotFaulty(sk.rs, at) {
			sn.excused++
		}
	}
	sk.trace.push(traceEv{kind: evAdmitted, mode: m, node: node, n: 1, at: at})
	o.judgeSlots(sk, node, at, m)
}

// Gave records a slot node gave back at at, taken in mode m.
func (o *Oracle) Gave(at time.Duration, node int, rule, key string, m Mode) {
	if !o.tick(at, "gave", rule, key) {
		return
	}
	sk := o.slotKey(at, rule, key)
	if sk == nil {
		return
	}
	sn := sk.node(node)
	p := &sn.lease
	if m == Fallback {
		p = &sn.fallback
	}
	if *p <= 0 {
		o.usage(at, rule, key, "node %d gave a %v slot it did not hold", node, m)
		return
	}
	sk.account(at)
	sk.inFlight--
	*p--
	if m == Fallback && sn.excused > sn.fallback {
		sn.excused = sn.fallback // (which one ended does not matter)
	}
	sk.trace.push(traceEv{kind: evReturned, node: node, n: 1, at: at})
}

// SlotGranted records a slot lease answer delivered to node at at, for a
// request it sent at sentAt: the store holds its slots until sentAt +
// ttl at least.
func (o *Oracle) SlotGranted(at, sentAt time.Duration, node int, rule, key string, granted int64, ttl time.Duration) {
	if !o.tick(at, "slot grant", rule, key) {
		return
	}
	if sk := o.slotKey(at, rule, key); sk != nil {
		sn := sk.node(node)
		sn.ends = max(sn.ends, sentAt+ttl)
		o.checked.Granted++
		sk.trace.push(traceEv{kind: evGranted, node: node, n: granted, at: at, store: sentAt, ttl: ttl})
	}
}

// SlotsCrashed records that node died at at: its handlers with it. The
// slots it took on its leases stay counted (ghosts) until its last lease
// known to the oracle ends, since the store holds them until then; those
// of its fallback end now.
func (o *Oracle) SlotsCrashed(at time.Duration, node int) {
	if !o.tick(at, "crash", "", "") {
		return
	}
	for _, sk := range o.slots.keys {
		sn := sk.nodes[node]
		if sn == nil {
			continue
		}
		sk.account(at)
		sk.inFlight -= sn.lease + sn.fallback
		if sn.lease > 0 && sn.ends > at {
			sk.ghosts = append(sk.ghosts, ghost{node: node, n: sn.lease, until: sn.ends})
		}
		*sn = slotNode{}
	}
}

// SlotsRestarted records that node started again at at; under the id it
// had (sameID), it tells the store anew what it holds (nothing), which
// ends the count of its ghosts.
func (o *Oracle) SlotsRestarted(at time.Duration, node int, sameID bool) {
	if !o.tick(at, "restart", "", "") || !sameID {
		return
	}
	for _, sk := range o.slots.keys {
		g := sk.ghosts[:0]
		for _, x := range sk.ghosts {
			if x.node != node {
				g = append(g, x)
			}
		}
		sk.ghosts = g
	}
}

// judgeSlots checks the bounds after a take by node: its own fallback,
// `failure: closed`, and the fleet's in flight.
func (o *Oracle) judgeSlots(sk *slotKey, node int, at time.Duration, m Mode) {
	rs, n := sk.rs, o.n
	l := rs.limit(at)
	share := l / int64(n)
	sn := sk.nodes[node]
	if m == Fallback {
		if rs.cur().FailClosed && o.slotsClosed(rs, at) {
			o.slotBreach(sk, Violation{Invariant: InvClosed, Node: node, From: at, To: at, At: at, Measured: float64(sn.fallback)})
		}
		if sn.fallback > share {
			o.slotBreach(sk, Violation{Invariant: InvSlotsNode, Node: node, From: at, To: at, At: at,
				Measured: float64(sn.fallback), Bound: float64(share)})
		} else {
			sk.passSlots(InvSlotsNode, node)
		}
	}
	g := sk.ghosts[:0]
	var ghosts int64
	for _, x := range sk.ghosts {
		if x.until > at {
			g = append(g, x)
			ghosts += x.n
		}
	}
	sk.ghosts = g
	bound := l
	if o.slotStepAhead(rs, at) {
		bound += l // what the store forgot, beside what it lends anew
	}
	for _, s := range sk.nodes {
		if s.excused > 0 && !o.slotsClosed(rs, at) {
			bound += share
		}
	}
	if total := sk.inFlight + ghosts; total > bound {
		o.slotBreach(sk, Violation{Invariant: InvSlots, Node: -1, From: at, To: at, At: at,
			Measured: float64(total), Bound: float64(bound),
			Detail: fmt.Sprintf("%d of them a crashed node's, counted until its lease ends; by node (lease/fallback/excused): %s", ghosts, sk.byNode())})
	} else {
		sk.passSlots(InvSlots, -1)
	}
}

// slotFaulty says whether a fault may keep a node from the allocator at
// at, as faulty does for tokens: one recorded over [from, to + L), L the
// rule's largest TTL or the call timeout if longer (a call sent into the
// fault falls back when it times out, after it).
func (o *Oracle) slotFaulty(rs *slotRuleState, at time.Duration) bool {
	l := o.cfg.CallTimeout
	for _, v := range rs.vers {
		l = max(l, v.TTL)
	}
	for _, f := range o.faults {
		if f.from > at {
			break
		}
		if at < f.to+l {
			return true
		}
	}
	return false
}

// slotStepAhead says whether the store's clock stepped forward within a
// TTL before at: its leases then ended early, up to the step, and it lent
// their slots again while the nodes, on their own clocks, still took slots
// on them until their ends (a TTL after they were sent, at most).
func (o *Oracle) slotStepAhead(rs *slotRuleState, at time.Duration) bool {
	var ttl time.Duration
	for _, v := range rs.vers {
		ttl = max(ttl, v.TTL)
	}
	for _, st := range o.forward {
		if st.ahead && st.at <= at && at < st.at+ttl {
			return true
		}
	}
	return false
}

// slotsClosed says whether every version in force at at is closed.
func (o *Oracle) slotsClosed(rs *slotRuleState, at time.Duration) bool {
	for i, v := range rs.vers {
		if (i == len(rs.vers)-1 || v.gone == forever || at < v.gone+v.TTL+v.MaxHold) && !v.FailClosed {
			return false
		}
	}
	return true
}

// slotBreach records v for the slot key, folding a breach that continues
// an open episode into it.
func (o *Oracle) slotBreach(sk *slotKey, v Violation) {
	for _, e := range sk.open {
		if e.inv == v.Invariant && e.node == v.Node {
			o.recs[e.idx].v.Repeats++
			return
		}
	}
	if len(o.recs) >= maxRecords {
		o.dropped++
		return
	}
	v.Rule, v.Key = sk.id.rule, sk.id.key
	v.Trace = sk.trace.lines()
	o.recs = append(o.recs, record{v: v})
	sk.open = append(sk.open, episode{inv: v.Invariant, node: v.Node, idx: len(o.recs) - 1})
	if o.cfg.Trace != nil {
		o.cfg.Trace("oracle: " + v.String())
	}
}

func (sk *slotKey) passSlots(inv Invariant, node int) {
	for i, e := range sk.open {
		if e.inv == inv && e.node == node {
			sk.open = append(sk.open[:i], sk.open[i+1:]...)
			return
		}
	}
}
