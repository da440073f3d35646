package oracle

import "time"

// Settled records n tokens more that a request admitted on an estimate was
// charged once its work ended (client.Reservation.Settle): what the node
// counted of them, from its lease, as the key's debt, or from its fallback
// allowance (mode Fallback), or, for a strict rule, sent to the allocator
// (mode Strict). They count as admitted at the instant they are settled,
// in every bound an admission of mode takes part in, and the rule, which
// must say it settles (Rule.Settles), carries its debt D in those bounds
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
	o.admit(at, storeAt, node, rule, key, n, mode, true)
}
