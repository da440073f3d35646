package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// enqueue takes a refill the hot path asked for: it goes out with the next
// batch, or when the key's retry time comes.
func (m *Manager) enqueue(p *Pool) {
	now := m.now()
	if p.table.gone.Load() || p.tokens.Load() < 0 {
		p.flags.set(flagQueued, false)
		return
	}
	m.init(p, now)
	m.arm(p, now)
	if at := p.notBeforeMono(); at.After(now) {
		m.delayed.push(p, at)
		return
	}
	m.schedule(p, now.Add(m.cfg.BatchWindow))
}

// schedule adds p to the batch that goes out at flushAt (at most at), once,
// and makes any delayed request of p stale.
func (m *Manager) schedule(p *Pool, at mono) {
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
func (m *Manager) flush(now mono) {
	for {
		p, ok := m.delayed.popDue(now)
		if !ok {
			break
		}
		m.wake(p, now) // (a renewal due: its share earns up to now first)
		if m.lapse(p, now) {
			continue
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
	if m.acquiring >= m.cfg.MaxInFlight { // an answer wakes the loop
		return
	}
	// (MaxInFlight bounds the Acquire calls a node has in flight: a flood
	// of new keys makes a few full calls, not many the allocator sheds.)
	// Calls are paced: while many keys ask (a long tail of keys each asking
	// once), they share fewer, fuller calls, which is what the store counts.
	if next := m.lastCall.Add(m.cfg.CallGap); now.Before(next) && len(m.pending) < m.cfg.MaxBatch {
		m.flushAt = next
		return
	}
	m.lastCall = now
	rest := m.pending
	m.pending = nil
	var batch []*Pool
	for len(rest) > 0 && m.acquiring < m.cfg.MaxInFlight {
		p := rest[0]
		rest = rest[1:]
		p.own.pending = false
		switch {
		case p.table.gone.Load() || p.tokens.Load() < 0: // its rule went, or it left its table
			p.flags.set(flagQueued, false)
		case p.own.inFlight != nil:
			// Its request is still on its way (MaxInFlight calls may be):
			// the answer schedules the next. Two at once would each take the
			// other's flight.
		case p.own.solo: // in a batch the allocator rejected: asks alone
			m.send([]*Pool{p}, now)
		default:
			if batch = append(batch, p); len(batch) == m.cfg.MaxBatch {
				m.send(batch, now)
				batch = nil
			}
		}
	}
	if len(batch) > 0 && m.acquiring < m.cfg.MaxInFlight {
		m.send(batch, now)
		batch = nil
	}
	// What did not fit waits for an answer to free a call.
	for _, p := range batch {
		p.own.pending = true
	}
	m.pending = append(append(m.pending, batch...), rest...)
	if len(m.pending) > 0 {
		m.flushAt = now
	}
}

// lapse lets the share of a key that is its only holder and has gone quiet
// run out instead of renewing it, and reports whether it did: the share
// ends with its lease, on the node and in the allocator alike. Quiet here
// is nothing asked of the key since its last request left and for two
// refresh intervals: a key touched once then costs its first Acquire and
// one renewal, not a renewal every refresh until it is found idle, and a
// sparse key (a few requests a second on this node) keeps its share, and is
// spared a round trip, between two of its requests (lapsing after one
// silent interval cost 0.89 of the ideal 200 ms away, TestDistance). A key
// with other holders gives its share back instead (giveBack), so that they
// have it sooner. The key asks again when its pool runs low.
func (m *Manager) lapse(p *Pool, now mono) bool {
	o := &p.own
	if o.shareRate() <= 0 || o.givingBack || o.unacked != nil || p.consumed.Load() > 0 || p.Holders() > 1 {
		return false
	}
	m.taken(p, m.sample(p, now))
	if o.askedAgain || now.Sub(o.lastActive) < 2*p.Rule().Lease.Refresh {
		return false
	}
	p.flags.set(flagQueued, false)
	return true
}

func (m *Manager) send(pools []*Pool, now mono) {
	reqs := make([]Request, len(pools))
	for i, p := range pools {
		o := &p.own
		r := p.Rule()
		if o.sent { // (a new key asks for its share of a refresh: init)
			m.taken(p, m.sample(p, now)) // its demand, for the size and the rate it asks
		}
		o.askedAgain = false
		f := m.retry(p, r, now)
		if f == nil {
			f = &flight{want: m.wantTokens(p), wantRate: m.wantRate(p, r, now), sent: now,
				returned: o.takeOverflow(), returnedEpoch: o.epoch, seq: m.nextSeq(p)}
			f.consumed, f.age = p.takeConsumed(now)
		}
		o.inFlight, o.sent = f, true
		reqs[i] = Request{Rule: p.table.name, Key: p.key, Want: f.want, Consumed: f.consumed, ConsumedAge: f.age,
			WantRate: f.wantRate, Returned: f.returned, ReturnedEpoch: f.returnedEpoch, Seq: f.seq}
	}
	timeout := max(m.cfg.RPCTimeout, 3*m.roundTrip())
	m.acquiring++
	m.rpcs.Add(1)
	m.calls.Add(1)
	go func() {
		defer m.rpcs.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := m.now()
		grants, version, err := m.cfg.Transport.Acquire(ctx, reqs)
		took := m.now().Sub(start)
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
	defer m.calls.Add(-1) // once applied: a test that waits sees its effect
	defer m.announce()
	m.acquiring--
	now := m.now()
	if r.err != nil {
		m.failed(r, now)
		return
	}
	m.reachable(true, nil)
	m.backoff, m.refused = 0, 0
	m.observeRoundTrip(r.took)
	for i, p := range r.pools {
		m.grant(p, r.grants[i], now)
		m.settled(p, now)
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
func (m *Manager) failed(r result, now mono) {
	rejected := errors.Is(r.err, ErrRejected)
	var rej *Rejection
	for i, p := range r.pools {
		o := &p.own
		if errors.As(r.err, &rej) && rej.Request == i {
			// Refused before it reached the store: nothing of it was applied.
			o.unacked = nil
			p.restoreConsumed(o.inFlight.consumed, o.inFlight.age, o.inFlight.sent)
		} else {
			// It may have been applied with its answer lost: the next request
			// is this one again, with its sequence number (see retry).
			o.unacked = o.inFlight
		}
		o.inFlight = nil
	}
	defer func() {
		for _, p := range r.pools {
			m.settled(p, now)
		}
	}()
	if rejected {
		m.rejected(r, now)
		return
	}
	m.reachable(false, r.err)
	m.backoff = min(max(time.Duration(float64(m.backoff)*1.6), m.cfg.BackoffBase), m.cfg.BackoffMax)
	jitter := 1 + 0.2*(2*rand.Float64()-1)
	m.nextAttempt = now.Add(time.Duration(float64(m.backoff) * jitter))
	for _, p := range r.pools {
		if m.stillWanted(p, now) {
			m.schedule(p, m.nextAttempt)
		}
	}
}

// stillWanted reports whether a key whose request failed should ask again:
// it has demand, or admitted tokens to report. One that asked once and went
// quiet drops its request, and with it the retries: a failed call of many
// keys each touched once must not be sent again and again until the
// allocator answers. A request that carried admitted tokens is kept and
// sent again as it was (applied once); one that carried none is dropped,
// and what it may have been granted dies with its lease in the allocator.
func (m *Manager) stillWanted(p *Pool, now mono) bool {
	o := &p.own
	if p.consumed.Load() > 0 || !m.quiet(p, p.Rule(), now) {
		return true
	}
	if f := o.unacked; f != nil {
		if f.consumed > 0 { // sent again as it was, so that it is applied once
			return true
		}
		o.unacked = nil
	}
	p.flags.set(flagQueued, false)
	return false
}

// rejected handles a call the allocator refused. When the refusal names
// one request (a key of a rule it no longer knows, say), that key waits a
// second and asks alone from then on, and the others ask again at once.
// When it names none, nothing in the call is wrong but the allocator cannot
// serve it (a store error that retrying will not cure, a refused
// identity): the whole call backs off, doubling up to maxRefusedBackoff,
// and comes back together once the allocator answers; splitting it into
// one call per key would multiply the load by the keys.
func (m *Manager) rejected(r result, now mono) {
	bad := -1
	var rej *Rejection
	if errors.As(r.err, &rej) && rej.Request >= 0 && rej.Request < len(r.pools) {
		bad = rej.Request
	}
	if bad < 0 && len(r.pools) > 1 && !errors.As(r.err, &rej) {
		bad = -2 // a refusal that says nothing: find the key by asking alone
	}
	switch {
	case bad >= 0:
		m.lastCall = 0 // long ago: the others ask again at once, unpaced
		for i, p := range r.pools {
			if i != bad {
				m.schedule(p, now)
			}
		}
		p := r.pools[bad]
		p.own.solo = true
		p.notBefore.Store(int64(now.Add(time.Second)))
		p.flags.set(flagQueued, false)
		m.cfg.Logger.Warn("allocator rejected a lease request", "rule", p.table.name, "err", r.err)
	case bad == -2:
		m.lastCall = 0
		for _, p := range r.pools {
			p.own.solo = true
			m.schedule(p, now)
		}
	default:
		m.refused = min(max(2*m.refused, 250*time.Millisecond), maxRefusedBackoff)
		at := now.Add(time.Duration(float64(m.refused) * (0.8 + 0.4*rand.Float64())))
		for _, p := range r.pools {
			p.own.solo = false
			m.schedule(p, at)
		}
		m.cfg.Logger.Warn("allocator refused a lease call; backing off", "keys", len(r.pools), "backoff", m.refused, "err", r.err)
	}
}

// maxRefusedBackoff bounds the wait between calls the allocator refuses
// as a whole: how late the keys return once it serves again.
const maxRefusedBackoff = 10 * time.Second

func (m *Manager) reachable(up bool, cause error) {
	if m.down.Swap(!up) == up { // the state changed
		if h := m.cfg.Hooks.Reachable; h != nil {
			h(up, cause)
		}
	}
}

// retry returns the key's last request if it failed and may still be
// answered again: the allocator keeps a holder's last answer for a TTL.
// Sent again as it was, with its first send time (the lease runs from
// then) and its sequence number, it is applied at most once. An older one
// is dropped and its consumption reported afresh: at worst debited twice,
// never lost.
func (m *Manager) retry(p *Pool, r *rules.Rule, now mono) *flight {
	f := p.own.unacked
	p.own.unacked = nil
	if f == nil {
		return nil
	}
	if now.Sub(f.sent) < r.Lease.TTL/2 {
		return f
	}
	p.restoreConsumed(f.consumed, f.age, f.sent)
	return nil
}

// nextSeq numbers a key's new request. A key starts at a random number
// below 2^31, so that a node restarted under the same name is not taken
// for a retry of its former self (one chance in two billion, within the
// holder's TTL), and the number stays short in the store.
func (m *Manager) nextSeq(p *Pool) uint64 {
	if p.own.seq == 0 {
		p.own.seq = 1 + rand.Uint64N(1<<31)
	}
	p.own.seq++
	return p.own.seq
}
