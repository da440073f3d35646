package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/lease"
)

// strictDebts keeps what strict rules admitted on the node's fallback allowance
// while the allocator could not decide, until it can be reported: like any
// fallback admission it is debited after recovery (docs/design.md, guarantee 4).
// Strict rules have no lease pools to carry the report; this is theirs.
type strictDebts struct {
	mu       sync.Mutex
	m        map[strictKey]*strictDebt
	flushing atomic.Bool
}

type strictKey struct{ rule, key string }

type strictDebt struct {
	n       int64
	since   time.Time // when the first of them was admitted
	settled int64     // settled costs above their estimate (settle.go), undated
}

// maxStrictDebts bounds the keys kept; an outage long and wide enough to
// pass it loses the reports of further keys (under-reporting by at most
// what those keys admitted on their allowances).
const maxStrictDebts = 100_000

func (d *strictDebts) add(rule, key string, n int64, now time.Time) { d.put(rule, key, n, 0, now) }

// addSettled keeps a settled cost that could not reach the allocator.
func (d *strictDebts) addSettled(rule, key string, n int64, now time.Time) {
	d.put(rule, key, 0, n, now)
}

func (d *strictDebts) put(rule, key string, n, settled int64, now time.Time) {
	if n <= 0 && settled <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = make(map[strictKey]*strictDebt)
	}
	k := strictKey{rule, key}
	if e, ok := d.m[k]; ok {
		if e.n <= 0 || now.Before(e.since) {
			e.since = now
		}
		e.n += n
		e.settled += settled
		return
	}
	if len(d.m) < maxStrictDebts {
		d.m[k] = &strictDebt{n: n, since: now, settled: settled}
	}
}

func (d *strictDebts) pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m) > 0
}

// take empties the debts into reports.
func (d *strictDebts) take(now time.Time) []lease.Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]lease.Request, 0, len(d.m))
	for k, e := range d.m {
		out = append(out, lease.Request{Rule: k.rule, Key: k.key, Consumed: e.n, ConsumedAge: max(now.Sub(e.since), 0), Settled: e.settled})
	}
	d.m = nil
	return out
}

// restore puts back reports that did not reach the allocator.
func (d *strictDebts) restore(reqs []lease.Request, now time.Time) {
	for _, r := range reqs {
		d.put(r.Rule, r.Key, r.Consumed, r.Settled, now.Add(-r.ConsumedAge))
	}
}

// reportStrict sends what strict rules admitted without the allocator, at
// most MaxBatch keys a call; what an outage keeps from the allocator waits
// for the next report, what it refuses (a rule it no longer knows) is
// dropped.
func (c *Client) reportStrict(ctx context.Context) {
	if !c.debts.flushing.CompareAndSwap(false, true) {
		return
	}
	defer c.debts.flushing.Store(false)
	now := c.cfg.clock.Now()
	reqs := c.debts.take(now)
	for len(reqs) > 0 {
		n := min(len(reqs), 1000)
		cctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
		_, err := c.leases.Acquire(cctx, reqs[:n])
		cancel()
		if err != nil && !errors.Is(err, lease.ErrRejected) {
			c.debts.restore(reqs, now)
			return
		}
		reqs = reqs[n:]
	}
}

// reportStrictSoon reports strict debts in the background, if any.
func (c *Client) reportStrictSoon() {
	if c.debts.pending() && !c.debts.flushing.Load() && !c.closed.Load() {
		go c.reportStrict(context.Background())
	}
}
