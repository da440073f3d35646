package oracle

import "time"

// Settled records n tokens more than its estimate that a request's work
// cost, once it ended (client.Reservation.Settle): all of them, whatever
// the node or the store counted of them, for they were used. They count as
// admitted at the instant they are settled, in every bound an admission of
// mode takes part in (mode Fallback: admitted on the node's fallback
// allowance; Strict: sent to the allocator), and the rule, which must say
// it settles (Rule.Settles), carries its debt D in those bounds
// (docs/bounds.md, "Settled costs"). They are no lease spend for the
// returns check (a debt goes to the store, not from the tokens held) and
// no admission for the accuracy or fairness.
func (o *Oracle) Settled(at, storeAt time.Duration, node int, rule, key string, n int64, mode Mode) {
	if rs := o.rules[rule]; rs != nil && !rs.cur().Settles {
		o.usage(at, rule, key, "node %d settled %d of a rule that does not say it settles", node, n)
		return
	}
	if n <= 0 {
		o.usage(at, rule, key, "node %d settled %d", node, n)
		return
	}
	o.admit(at, storeAt, node, rule, key, n, mode, settlement)
}

// Owes records that the callers of a request node admitted on rule's key
// will settle n tokens above its estimate; n < 0 when they have settled,
// or went with their node. The bounds with D hold while the key's callers
// owe at most D at once (bounds.md: what passes D is dropped, uncounted),
// so a run whose callers owe more is outside them, and says so: its
// scenario must draw a larger D. It is the world's count, not the
// product's: the callers' cost is drawn when they are admitted.
func (o *Oracle) Owes(at time.Duration, node int, rule, key string, n int64) {
	rs := o.rules[rule]
	if rs == nil {
		o.usage(at, rule, key, "node %d: callers owe %d of an unknown rule", node, n)
		return
	}
	if o.owed == nil {
		o.owed = map[keyID]int64{}
	}
	id := keyID{rule, key}
	was := o.owed[id]
	o.owed[id] = was + n
	switch d := rs.cur().debt(); {
	case was+n < 0:
		o.usage(at, rule, key, "node %d: callers owe %d", node, was+n)
	case n > 0 && float64(was) <= d && float64(was+n) > d:
		o.usage(at, rule, key, "callers owe %d above their estimates at once, above the rule's max_debt %g: outside the bounds with D", was+n, d)
	}
}

// Undone records n tokens of a request node admitted on its lease that the
// lease took back once the work cost less than its estimate (KeyLease.Undo
// gave them back): the node holds them unspent again, and may return them.
// The bounds keep the admission whole: counting a token twice if it is
// admitted again errs on the side of a violation, never of missing one.
func (o *Oracle) Undone(at time.Duration, node int, rule, key string, n int64) {
	if !o.tick(at, "undo", rule, key) {
		return
	}
	if n <= 0 {
		o.usage(at, rule, key, "node %d undid %d", node, n)
		return
	}
	ks := o.key(at, rule, key)
	if ks == nil {
		return
	}
	ns := ks.node(node)
	if ns.spent < n {
		o.usage(at, rule, key, "node %d undid %d of %d spent on its lease", node, n, ns.spent)
		return
	}
	ns.spent -= n
}
