package client

import (
	"context"
	"sync/atomic"
)

// Reservation is a decision whose tokens can be given back, or settled
// once the work's cost is known: a caller that admitted a request and then
// failed before doing any work (a bad argument, a dependency down) cancels
// it, and the tokens serve the next request instead of being lost; one
// whose work cost more or less than its estimate (an LLM call's tokens, a
// query's rows) settles it (settle.go).
type Reservation struct {
	Decision
	spent spend
	state atomic.Uint32 // open, cancelled or settled

	c        *Client
	rs       *ruleState
	key      string
	reserved int64 // the estimate; 0: exempt
}

const (
	reservationOpen uint32 = iota
	reservationCancelled
	reservationSettled
)

// Reserve decides a request that costs n tokens, as AllowN does, and
// returns the decision with what it took, for Cancel or Settle. An error
// is a refusal, as with AllowN. An estimate of 0 exempts the request, as a
// cost of 0 does in httplimit: it is not decided (Allowed, nothing taken)
// and its Settle charges nothing. To charge a request whose cost is
// unknown until its work ends, reserve 1 and settle the rest.
func (c *Client) Reserve(ctx context.Context, rule, key string, n int64) (*Reservation, error) {
	return c.reserve(ctx, c.rules.Load().get(rule), rule, key, n)
}

func (c *Client) reserve(ctx context.Context, rs *ruleState, rule, key string, n int64) (*Reservation, error) {
	if n == 0 {
		r, err := c.check(rs, rule, key, 1)
		if err != nil {
			return nil, err
		}
		return &Reservation{Decision: Decision{Allowed: true, Limit: r.Limit, Rule: rule}}, nil
	}
	d, sp, err := c.decide(ctx, rs, rule, key, n)
	if err != nil {
		return nil, err
	}
	if !d.Allowed || d.Shadow {
		sp = spend{} // a refusal took nothing
	}
	return &Reservation{Decision: d, spent: sp, c: c, rs: rs, key: key, reserved: n}, nil
}

// Cancel gives back the tokens the reservation took and reports how many
// went back. It gives them back once, to where they came from: the lease
// they were taken from, only while that lease lasts (never into a later
// one), or the node's fallback allowance, which also stops counting them as
// admitted. A refused reservation gives back nothing; nor does one a
// strict rule decided, since the allocator has counted it. Cancel is safe
// to call more than once and from several goroutines; after Settle it
// gives back nothing.
func (r *Reservation) Cancel() int64 {
	if r == nil || !r.state.CompareAndSwap(reservationOpen, reservationCancelled) {
		return 0
	}
	return r.spent.undo()
}
