package lease

import (
	"math"
	"time"
)

// sweep adds what rate shares earned, expires leases, samples each key's
// rate, resizes its lease, gives back the shares of keys gone quiet, asks
// for refills the hot path could not ask for, and returns idle keys.
func (m *Manager) sweep(now time.Time) {
	var rets []*Pool
	for _, t := range m.tableList() {
		var taken int64
		t.each(func(p *Pool) {
			m.init(p, now)
			m.accrue(p, now)
			m.expire(p, now)
			taken += m.sample(p, now)
			if m.idle(p, now) {
				rets = append(rets, p)
				return
			}
			m.giveBack(p, now)
			if p.consumed.Load() > 0 || (p.tokens.Load() < p.low.Load() && now.Sub(p.own.lastActive) < 2*m.cfg.Sweep) {
				p.WantRefill()
			}
		})
		if h := m.cfg.Hooks.Taken; h != nil && taken > 0 {
			h(t.name, taken)
		}
		if t.gone.Load() && t.Len() == 0 {
			m.drop(t)
		}
	}
	if len(rets) > 0 {
		m.evict(rets)
	}
}

// expire removes tokens whose lease has ended.
func (m *Manager) expire(p *Pool, now time.Time) {
	o := &p.own
	if o.carry > 0 && !now.Before(o.carryExpiry) {
		p.gen.Add(1)
		if left := o.carry - (p.taken() - o.takenAtCarry); left > 0 {
			p.remove(left)
		}
		o.carry = 0
	}
	if !o.expiry.IsZero() && !now.Before(o.expiry) {
		p.gen.Add(1)
		p.remove(math.MaxInt64)
		o.expiry, o.carry = time.Time{}, 0
	}
	if p.served.Load() && !now.Before(o.servedUntil) {
		p.served.Store(false)
	}
}

// sample updates the key's demand rate (an EWMA over RateWindow) and the
// lease size that follows from it; it returns the tokens taken since the
// last sample.
func (m *Manager) sample(p *Pool, now time.Time) int64 {
	o := &p.own
	taken := p.taken()
	took := taken - o.lastTaken
	demand := took + p.missed.Swap(0)
	o.lastTaken = taken
	elapsed := now.Sub(o.lastSample)
	if elapsed <= 0 {
		return took
	}
	o.lastSample = now
	if demand > 0 {
		o.lastActive = now
	}
	alpha := 1 - math.Exp(-elapsed.Seconds()/m.cfg.RateWindow.Seconds())
	o.rate += alpha * (float64(demand)/elapsed.Seconds() - o.rate)
	fast := 1 - math.Exp(-elapsed.Seconds()/(2*m.cfg.Sweep).Seconds())
	o.fastRate += fast * (float64(demand)/elapsed.Seconds() - o.fastRate)
	r := p.table.Rule()
	m.resize(p, r, o.rate*r.Lease.Refresh.Seconds())
	return took
}

// giveBack sends at once the renewal of a share whose key has gone quiet:
// it asks for no rate, so the share goes back to the key's other holders
// within a few sweeps instead of at the next renewal.
func (m *Manager) giveBack(p *Pool, now time.Time) {
	o := &p.own
	if o.share <= 0 || o.inFlight != nil || o.givingBack || !m.quiet(p, p.table.Rule(), now) {
		return
	}
	o.givingBack = true
	m.schedule(p, now)
}

// idle reports whether the key should leave: its rule is gone (nothing can
// be reported or returned for it any more), or it has had no demand for
// half a lease TTL and has nothing in flight or unreported.
func (m *Manager) idle(p *Pool, now time.Time) bool {
	if p.table.gone.Load() {
		return p.own.inFlight == nil
	}
	if p.own.inFlight != nil || p.own.unacked != nil || p.queued.Load() || p.consumed.Load() > 0 {
		return false
	}
	return now.Sub(p.own.lastActive) >= p.table.Rule().Lease.TTL/2
}

// drop forgets an emptied table of a rule that is gone.
func (m *Manager) drop(t *Table) {
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	if m.tables[t.name] == t {
		delete(m.tables, t.name)
	}
}
