package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// enqueue takes a refill the hot path asked for: it goes out with the next
// batch, or when the key's retry time comes.
func (m *Manager) enqueue(p *Pool) {
	now := m.clk.Now()
	if p.table.gone.Load() || p.tokens.Load() < 0 {
		p.queued.Store(false)
		return
	}
	m.init(p, now)
	if at := p.NotBefore(); at.After(now) {
		m.delayed.push(p, at)
		return
	}
	m.schedule(p, now.Add(m.cfg.BatchWindow))
}

// schedule adds p to the batch that goes out at flushAt (at most at), once,
// and makes any delayed request of p stale.
func (m *Manager) schedule(p *Pool, at time.Time) {
	p.own.delaySeq++
	if len(m.pending) == 0 || at.Before(m.flushAt) {
		m.flushAt = at
	}
	if !p.own.pending {
		p.own.pending = true
		m.pending = append(m.pending, p)
	}
}

// flush sends the pending refills that are due, at most MaxBatch per call.
func (m *Manager) flush(now time.Time) {
	for {
		p, ok := m.delayed.popDue(now)
		if !ok {
			break
		}
		m.schedule(p, now)
	}
	if len(m.pending) == 0 || now.Before(m.flushAt) {
		return
	}
	if m.down.Load() && now.Before(m.nextAttempt) {
		m.flushAt = m.nextAttempt
		return
	}
	batch := make([]*Pool, 0, min(len(m.pending), m.cfg.MaxBatch))
	for _, p := range m.pending {
		p.own.pending = false
		switch {
		case p.table.gone.Load() || p.tokens.Load() < 0: // its rule went, or it left its table
			p.queued.Store(false)
		case p.own.solo: // in a batch the allocator rejected: asks alone
			m.send([]*Pool{p}, now)
		default:
			if batch = append(batch, p); len(batch) == m.cfg.MaxBatch {
				m.send(batch, now)
				batch = make([]*Pool, 0, m.cfg.MaxBatch)
			}
		}
	}
	if len(batch) > 0 {
		m.send(batch, now)
	}
	m.pending = nil
}

func (m *Manager) send(pools []*Pool, now time.Time) {
	reqs := make([]Request, len(pools))
	for i, p := range pools {
		o := &p.own
		r := p.table.Rule()
		f := &flight{want: m.wantTokens(p), wantRate: m.wantRate(p, r, now), sent: now}
		f.consumed, f.age = p.takeConsumed(now)
		o.inFlight, o.lastSent = f, now
		// What the share earned beyond the pool's cap goes back now; if the
		// call fails those tokens are lost, which only ever under-admits.
		reqs[i] = Request{Rule: p.table.name, Key: p.key, Want: f.want, Consumed: f.consumed, ConsumedAge: f.age,
			WantRate: f.wantRate, Returned: o.overflow, ReturnedEpoch: o.epoch}
		o.overflow = 0
	}
	timeout := max(m.cfg.RPCTimeout, 3*m.roundTrip())
	m.rpcs.Add(1)
	m.calls.Add(1)
	go func() {
		defer m.rpcs.Done()
		defer m.calls.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := m.clk.Now()
		grants, version, err := m.cfg.Transport.Acquire(ctx, reqs)
		took := m.clk.Now().Sub(start)
		if err == nil && len(grants) != len(reqs) {
			err = errors.New("lease: allocator answered with the wrong number of leases")
		}
		if h := m.cfg.Hooks.Acquired; h != nil {
			var wanted, granted int64
			for i := range reqs {
				wanted += reqs[i].Want
				if err == nil {
					granted += grants[i].Granted
				}
			}
			h(len(reqs), wanted, granted, took, err)
		}
		// Delivered even after Close began: Close applies what calls in
		// flight bring, so that their grants are returned too.
		m.results <- result{pools: pools, grants: grants, version: version, err: err, took: took}
	}()
}

func (m *Manager) apply(r result) {
	defer m.announce()
	now := m.clk.Now()
	if r.err != nil {
		m.failed(r, now)
		return
	}
	m.reachable(true, nil)
	m.backoff = 0
	m.observeRoundTrip(r.took)
	for i, p := range r.pools {
		m.grant(p, r.grants[i], now)
	}
	if r.version != "" && r.version != m.version {
		m.version = r.version
		if h := m.cfg.Hooks.RulesVersion; h != nil {
			h(r.version)
		}
	}
}

// failed handles an Acquire that got no answer: the consumption it carried
// is kept for the next report; an outage backs off and retries the keys.
func (m *Manager) failed(r result, now time.Time) {
	rejected := errors.Is(r.err, ErrRejected)
	for _, p := range r.pools {
		f := p.own.inFlight
		p.restoreConsumed(f.consumed, f.age, f.sent)
		p.own.inFlight = nil
	}
	if rejected {
		m.rejected(r, now)
		return
	}
	m.reachable(false, r.err)
	m.backoff = min(max(time.Duration(float64(m.backoff)*1.6), m.cfg.BackoffBase), m.cfg.BackoffMax)
	jitter := 1 + 0.2*(2*rand.Float64()-1)
	m.nextAttempt = now.Add(time.Duration(float64(m.backoff) * jitter))
	for _, p := range r.pools {
		m.schedule(p, m.nextAttempt)
	}
}

// rejected handles a batch the allocator refused as a whole (one key of a
// rule it no longer knows, say): each key asks again alone, at once, so
// that one bad key costs the others a round trip, not a second; a key
// rejected alone waits a second.
func (m *Manager) rejected(r result, now time.Time) {
	if len(r.pools) > 1 {
		for _, p := range r.pools {
			p.own.solo = true
			m.schedule(p, now)
		}
		return
	}
	p := r.pools[0]
	p.notBefore.Store(now.Add(time.Second).UnixNano())
	p.queued.Store(false)
	m.cfg.Logger.Warn("allocator rejected a lease request", "rule", p.table.name, "err", r.err)
}

func (m *Manager) reachable(up bool, cause error) {
	if m.down.Swap(!up) == up { // the state changed
		if h := m.cfg.Hooks.Reachable; h != nil {
			h(up, cause)
		}
	}
}
