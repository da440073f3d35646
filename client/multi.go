package client

import (
	"context"
	"errors"
	"math"

	"github.com/allot-dev/allot/internal/rules"
)

// RuleKey names one limit of a multi-rule check.
type RuleKey struct{ Rule, Key string }

// AllowAll decides a request that must pass every limit, as "10 per second
// AND 1,000 per hour": it spends n from every limit or from none. A refused
// request costs nothing on the limits that would have let it pass. The
// decision is the refusing limit's, or, when all pass, the one with the
// least remaining. At most one limit may be under a strict rule; it is
// asked last, since what the allocator spends cannot be given back. A
// shadow rule that would refuse lets the request through (Decision.Shadow)
// and spends nothing.
func (c *Client) AllowAll(ctx context.Context, n int64, limits ...RuleKey) (Decision, error) {
	if len(limits) == 0 {
		return Decision{}, errors.New("allot: AllowAll needs at least one limit")
	}
	states := make([]*ruleState, len(limits))
	keyRules := make([]*rules.Rule, len(limits)) // each key's rule, resolved once
	strict := -1
	for i, l := range limits {
		rs, r, err := c.state(l.Rule, l.Key, n)
		if err != nil {
			return Decision{}, err
		}
		keyRules[i] = r
		if rs.table == nil {
			if strict >= 0 {
				return Decision{}, ErrTwoStrict
			}
			strict = i
		}
		states[i] = rs
	}
	spent := make([]spend, 0, len(limits))
	undo := func() {
		for _, s := range spent {
			s.undo()
		}
	}
	all := Decision{Allowed: true, Remaining: math.MaxInt64}
	for i, l := range limits {
		if i == strict {
			continue
		}
		d, s, err := c.take(ctx, states[i], keyRules[i], l.Key, n, overCapRefuse)
		if err == nil {
			d = shadow(states[i], d)
		}
		if err != nil || !d.Allowed {
			undo()
			return d, err
		}
		spent = append(spent, s)
		all = tighter(all, d)
	}
	if strict >= 0 {
		d, err := c.decideStrict(ctx, states[strict], keyRules[strict], limits[strict].Key, n, limits[strict].Key)
		if err == nil {
			d = shadow(states[strict], d)
		}
		if err != nil || !d.Allowed {
			undo()
			return d, err
		}
		all = tighter(all, d)
	}
	return all, nil
}

// tighter keeps the decision with less room left; a shadow refusal
// anywhere marks the result.
func tighter(a, b Decision) Decision {
	out := a
	if b.Remaining < a.Remaining {
		out = b
	}
	out.Shadow = a.Shadow || b.Shadow
	return out
}
