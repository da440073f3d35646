package client

import (
	"context"
	"errors"

	"github.com/allot-dev/allot/internal/lease"
)

// reportStrict sends what strict rules admitted without the allocator, at
// most MaxBatch keys a call; what an outage keeps from the allocator waits
// for the next report, what it refuses (a rule it no longer knows) is
// dropped.
func (c *Client) reportStrict(ctx context.Context) {
	if !c.debtsFlushing.CompareAndSwap(false, true) {
		return
	}
	defer c.debtsFlushing.Store(false)
	now := c.cfg.clock.Now()
	reqs := c.debts.Take(now)
	for len(reqs) > 0 {
		n := min(len(reqs), 1000)
		cctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
		_, err := c.leases.Acquire(cctx, reqs[:n])
		cancel()
		if err != nil && !errors.Is(err, lease.ErrRejected) {
			c.debts.Restore(reqs, now)
			return
		}
		reqs = reqs[n:]
	}
}

// reportStrictSoon reports strict debts in the background, if any.
func (c *Client) reportStrictSoon() {
	if c.debts.Pending() && !c.debtsFlushing.Load() && !c.closed.Load() {
		go c.reportStrict(context.Background())
	}
}
