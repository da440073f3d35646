package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/allot-dev/allot/internal/lease"
)

// Settle says what the reserved request cost once its work ended (an LLM
// call's tokens, a query's rows, an upload's bytes), and charges the
// difference from the estimate it was reserved with:
//
//   - actual above the estimate: the difference is taken, from the key's
//     lease while it holds tokens, else as a debt of the key, bounded by
//     the rule's max_debt (one burst for a token bucket, none for a window
//     rule unless its file says so). A key in debt refuses every request,
//     with a RetryAfter saying when refill repays it. A leased key's debt
//     goes to the allocator with its next Acquire, where the whole fleet
//     repays it before anything more is admitted; a strict rule's takes one
//     Acquire call, now (kept for the next report if the allocator cannot
//     be reached). What the debt's bound leaves uncounted is said by
//     ErrDebtAboveMax.
//   - actual below it: the difference is given back, never more than was
//     reserved, as Cancel gives back: to the lease it came from while that
//     lease lasts (a window rule's window that has ended since takes
//     nothing back: its count is over), or to the fallback allowance. A strict
//     rule gives nothing back: the allocator counted the estimate, and a
//     node can return only what it holds.
//
// A refused reservation, an exempt one (an estimate of 0) and a shadow
// rule's let-through refusal charge nothing. Settle is called once: a
// second call, or one after Cancel, returns ErrReservationDone and charges
// nothing; Cancel after Settle gives back nothing.
func (r *Reservation) Settle(actual int64) error {
	if r == nil {
		return fmt.Errorf("%w: Settle on a nil reservation", ErrReservationDone)
	}
	if actual < 0 {
		return fmt.Errorf("%w: actual cost %d", ErrInvalidCost, actual)
	}
	if !r.state.CompareAndSwap(reservationOpen, reservationSettled) {
		if r.state.Load() == reservationCancelled {
			return fmt.Errorf("%w: Settle after Cancel", ErrReservationDone)
		}
		return fmt.Errorf("%w: settled twice", ErrReservationDone)
	}
	if r.reserved == 0 || !r.Allowed || r.Shadow {
		return nil
	}
	switch diff := actual - r.reserved; {
	case diff < 0:
		r.spent.undoN(-diff)
	case diff > 0:
		return r.c.charge(r, diff)
	}
	return nil
}

// undoN gives back m of the tokens the spend took (m at most what it took).
func (s spend) undoN(m int64) int64 {
	s.n = min(m, s.n)
	return s.undo()
}

// charge takes n tokens more for r, wherever its decision was made.
func (c *Client) charge(r *Reservation, n int64) error {
	rule := r.rs.rule.ForKey(r.key)
	now := c.cfg.clock.Mono()
	dropped := int64(0)
	switch sp := r.spent; {
	case sp.key != nil:
		dropped = c.chargeLease(r, sp, n)
	case sp.allowance != nil: // a strict rule's fallback allowance
		got, _ := sp.allowance.Charge(rule, now, n)
		if got > 0 && r.rs.table == nil {
			c.debts.Add(rule.Name, r.key, got, c.cfg.clock.Now())
		}
		dropped = n - got
	case r.Mode == ModeStrict:
		c.settleStrict(rule.Name, r.key, n)
	}
	if dropped > 0 {
		return fmt.Errorf("%w: %d of the %d tokens above the estimate went uncounted (rule %q, max_debt %d)",
			ErrDebtAboveMax, dropped, n, rule.Name, rule.Debt())
	}
	return nil
}

// chargeLease charges a leased key, and the key's new lease when the one
// the tokens came from has left its table since (idle, or its rule
// reloaded): the debt is the key's, whichever lease holds it.
func (c *Client) chargeLease(r *Reservation, sp spend, n int64) int64 {
	now := c.cfg.clock.Mono()
	dropped, gone := sp.key.Charge(sp.v, n, now)
	for range 3 {
		if !gone {
			break
		}
		rs := c.rules.Load().get(r.rs.rule.Name)
		if rs == nil || rs.table == nil {
			break
		}
		k := rs.table.Key(r.key)
		if k == nil { // the node holds Lease.MaxKeys keys
			break
		}
		dropped, gone = k.Charge(lease.Verdict{Allowed: true}, n, now)
	}
	return dropped
}

// settleStrict takes n settled tokens of a strict rule's key at the
// allocator, in one Acquire that carries nothing else. A call that fails
// is kept for the next report of strict rules' debts.
func (c *Client) settleStrict(rule, key string, n int64) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CheckTimeout)
	defer cancel()
	_, err := c.leases.Acquire(ctx, []lease.Request{{Rule: rule, Key: key, Settled: n}})
	if err != nil && !errors.Is(err, lease.ErrRejected) {
		c.debts.AddSettled(rule, key, n, c.cfg.clock.Now())
	}
}

// Reserved is the estimate the reservation was made with, 0 for an
// exempt one: Settle(r.Reserved()) charges nothing more and gives nothing
// back.
func (r *Reservation) Reserved() int64 { return r.reserved }
