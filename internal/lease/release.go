package lease

import (
	"context"
	"time"
)

// leaveSoon marks an idle pool to leave at the end of the loop's turn.
func (m *Manager) leaveSoon(p *Pool) { m.leaving = append(m.leaving, p) }

// evict takes the pools that left in this turn out of their tables; what
// they held goes back with the next Release, which waits up to releaseGap
// for others (unless it is full): idle keys leave one by one, on their own
// deadlines, and would otherwise make a call each. A Take racing with the
// eviction fails on the sentinel and looks again.
func (m *Manager) evict(now mono) {
	for _, p := range m.leaving {
		if ret, ok := m.leave(p); ok {
			m.returns = append(m.returns, ret)
		}
		if t := p.table; t.gone.Load() && t.Len() == 0 {
			m.drop(t)
		}
	}
	clear(m.leaving) // (the array would keep the pools that left alive)
	m.leaving = m.leaving[:0]
	m.sharing.compact()
	if len(m.returns) == 0 || (len(m.returns) < m.cfg.MaxBatch && now.Before(m.lastRelease.Add(releaseGap))) {
		return
	}
	m.lastRelease = now
	rets := m.returns
	m.returns = nil
	m.rpcs.Add(1)
	m.calls.Add(1)
	go func() {
		defer m.rpcs.Done()
		defer m.calls.Add(-1)
		m.release(context.Background(), rets)
	}()
}

// releaseGap is the least time between two Release calls of idle keys.
// Tokens given back later are conservative: nobody uses them meanwhile.
const releaseGap = 100 * time.Millisecond

// leave takes p out of its table for good and says what to give back: the
// tokens of its lease and what its share earned beyond the pool's cap.
func (m *Manager) leave(p *Pool) (Return, bool) {
	left := p.tokens.Swap(evicted)
	if left == evicted { // already gone
		return Return{}, false
	}
	m.keys.Add(-1)
	m.sharing.remove(p)
	m.timers.cancel(p)
	m.delayed.cancel(p)
	p.table.keys.remove(p.key, p)
	p.flags.set(flagSharing, false)
	o := &p.own
	o.asleep = false
	p.flags.set(flagAsleep, false)
	tokens := o.takeOverflow()
	if left > 0 && !o.expiry.IsZero() {
		tokens += left
	}
	if o.busy != nil {
		o.busy.share = 0
	}
	if tokens <= 0 || p.table.gone.Load() {
		return Return{}, false
	}
	return Return{Rule: p.table.name, Key: p.key, Tokens: tokens, Epoch: o.epoch}, true
}

func (m *Manager) release(ctx context.Context, rets []Return) error {
	var firstErr error
	for len(rets) > 0 {
		n := min(len(rets), m.cfg.MaxBatch)
		// Each call gets the usual short deadline: an unreachable allocator
		// must not hold a node's shutdown for the whole of ctx.
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		err := m.cfg.Transport.Release(cctx, rets[:n])
		cancel()
		if h := m.cfg.Hooks.Released; h != nil {
			var tokens int64
			for _, r := range rets[:n] {
				tokens += r.Tokens
			}
			h(n, tokens, err)
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		rets = rets[n:]
	}
	return firstErr
}

// returnAll runs after the loop has stopped: it reports what was admitted
// outside leases and gives back every leased token.
func (m *Manager) returnAll(ctx context.Context) error {
	var retries, reports []Request // a key appears once per call: retries go first
	rets := m.returns              // evicted keys' that were waiting for their call
	m.returns = nil
	for _, t := range m.tableList() {
		t.each(func(p *Pool) {
			if f := p.own.unacked; f != nil && !t.gone.Load() { // it may not have been applied
				retries = append(retries, Request{Rule: t.name, Key: p.key, Consumed: f.consumed, ConsumedAge: f.age, Seq: f.seq})
			}
			if c, age := p.takeConsumed(m.now()); c > 0 && !t.gone.Load() {
				reports = append(reports, Request{Rule: t.name, Key: p.key, Consumed: c, ConsumedAge: age})
			}
			if ret, ok := m.leave(p); ok {
				rets = append(rets, ret)
			}
		})
	}
	firstErr := m.report(ctx, retries)
	if err := m.report(ctx, reports); err != nil && firstErr == nil {
		firstErr = err
	}
	if err := m.release(ctx, rets); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// report sends consumption reports, MaxBatch at a time.
func (m *Manager) report(ctx context.Context, reports []Request) error {
	var firstErr error
	for len(reports) > 0 {
		n := min(len(reports), m.cfg.MaxBatch)
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		if _, _, err := m.cfg.Transport.Acquire(cctx, reports[:n]); err != nil && firstErr == nil {
			firstErr = err
		}
		cancel()
		reports = reports[n:]
	}
	return firstErr
}
