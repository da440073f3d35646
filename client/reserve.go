package client

import (
	"context"
	"sync/atomic"
)

// Reservation is a decision whose tokens can be given back: a caller that
// admitted a request and then failed before doing any work (a bad
// argument, a dependency down) cancels it, and the tokens serve the next
// request instead of being lost.
type Reservation struct {
	Decision
	spent spend
	done  atomic.Bool
}

// Reserve decides a request that costs n tokens, as AllowN does, and
// returns the decision with what it took, for Cancel. An error is a
// refusal, as with AllowN.
func (c *Client) Reserve(ctx context.Context, rule, key string, n int64) (*Reservation, error) {
	return c.reserve(ctx, c.rules.Load().byName[rule], rule, key, n)
}

func (c *Client) reserve(ctx context.Context, rs *ruleState, rule, key string, n int64) (*Reservation, error) {
	d, sp, err := c.decide(ctx, rs, rule, key, n)
	if err != nil {
		return nil, err
	}
	if !d.Allowed || d.Shadow {
		sp = spend{} // a refusal took nothing
	}
	return &Reservation{Decision: d, spent: sp}, nil
}

// Cancel gives back the tokens the reservation took and reports how many
// went back. It gives them back once, to where they came from: the lease
// they were taken from, only while that lease lasts (never into a later
// one), or the node's fallback share, which also stops counting them as
// admitted. A refused reservation gives back nothing; nor does one a
// strict rule decided, since the allocator has counted it. Cancel is safe
// to call more than once and from several goroutines.
func (r *Reservation) Cancel() int64 {
	if r == nil || r.done.Swap(true) {
		return 0
	}
	return r.spent.undo()
}
