package lease

import (
	"math"
	"time"
)

// tick runs every sweep while some keys hold a share of a rate: their
// shares earn, their rates are sampled, those gone quiet give their shares
// back to the key's other holders, and those idle with no other holder
// leave. No other key costs the tick anything.
func (m *Manager) tick(now mono) {
	for p := range m.sharing.m {
		m.accrue(p, now)
		m.expire(p, now)
		m.taken(p, m.sample(p, now))
		m.giveBack(p, now)
		if p.Holders() <= 1 && m.idle(p, now) {
			// Its only holder, idle: it leaves, and the Release of what its
			// lease holds ends its share in the allocator too.
			m.leaveSoon(p)
			continue
		}
		if p.own.shareRate() <= 0 { // it ended: back to its own deadlines
			m.sharing.remove(p)
			m.arm(p, now)
			continue
		}
		m.sleep(p, now)
	}
	m.sharing.compact()
}

// service does a key's bookkeeping when one of its deadlines comes: the
// lease ends, the served time ends, the idle check. A key with nothing due
// is not visited.
func (m *Manager) service(p *Pool, now mono) {
	if p.tokens.Load() < 0 { // evicted
		return
	}
	m.init(p, now)
	m.accrue(p, now)
	m.expire(p, now)
	m.taken(p, m.sample(p, now))
	if o := &p.own; o.lastActive.Equal(now) && o.shareRate() <= 0 {
		// Demand since the key's last look, when it had a deadline: at some
		// time in between, not now. Dated half an idle period back, a key
		// touched once leaves one and a half idle periods after its use,
		// not two, while its lease still holds what it gives back.
		o.lastActive = now.Add(-idleAfter(p) / 2)
	}
	if m.idle(p, now) {
		m.leaveSoon(p)
		return
	}
	if p.consumed.Load() > 0 {
		p.WantRefill()
	}
	m.arm(p, now)
}

// arm sets the key's next deadline: when its tokens (or an older lease's)
// end, when it stops being served, when it may be idle. A key holding a
// share is the tick's.
func (m *Manager) arm(p *Pool, now mono) {
	o := &p.own
	if m.sharing.has(p) || p.tokens.Load() < 0 {
		m.timers.cancel(p)
		o.timerAt = 0
		return
	}
	next := o.lastActive.Add(idleAfter(p))
	if o.carry() > 0 {
		next = min(next, o.busy.carryExpiry)
	}
	if !o.expiry.IsZero() {
		next = min(next, o.expiry)
	}
	if p.flags.is(flagServed) {
		next = min(next, o.servedUntil)
	}
	if o.asleep && p.Holders() > 1 { // its share goes back once it is quiet
		next = min(next, o.lastActive.Add(m.quietAfter(p, p.Rule())))
	}
	if !next.After(now) { // busy (a request on its way): look again later
		next = now.Add(p.Rule().Lease.TTL / 2)
	}
	if o.timerAt.IsZero() || next.Before(o.timerAt) {
		o.timerAt = next
		m.timers.push(p, next)
	}
}

// settled follows a key whose request has been answered (or has failed):
// a key of a rule that went leaves; the others get their deadlines.
func (m *Manager) settled(p *Pool, now mono) {
	if p.table.gone.Load() {
		m.service(p, now)
		return
	}
	m.taken(p, m.sample(p, now)) // a key that was not sampled meanwhile
	m.share(p, now)
	m.arm(p, now)
}

// share notes that the key holds a share (or no longer does).
func (m *Manager) share(p *Pool, now mono) {
	if p.own.shareRate() > 0 {
		if !m.sharing.has(p) {
			m.sharing.add(p)
			m.timers.cancel(p)
			p.own.timerAt = 0
			if m.sharing.len() == 1 && !m.nextSweep.After(now) { // (a short lease may have brought it forward)
				m.nextSweep = now.Add(m.cfg.Sweep)
			}
		}
		return
	}
	m.sharing.remove(p)
}

// taken reports lease admissions to the owner's metrics.
func (m *Manager) taken(p *Pool, n int64) {
	if h := m.cfg.Hooks.Taken; h != nil && n > 0 {
		h(p.table.name, n)
	}
}

// forgetTables takes the pools of rules that went out of their tables:
// nothing can be reported or returned for them any more.
func (m *Manager) forgetTables(now mono) {
	m.forgotMu.Lock()
	tables := m.forgotten
	m.forgotten = nil
	m.forgotMu.Unlock()
	for _, t := range tables {
		t.each(func(p *Pool) { m.service(p, now) })
		if t.Len() == 0 {
			m.drop(t)
		}
	}
}

// expire removes tokens whose lease has ended.
func (m *Manager) expire(p *Pool, now mono) {
	o := &p.own
	if b := o.busy; b != nil && b.carry > 0 && !now.Before(b.carryExpiry) {
		p.gen.Add(1)
		if left := b.carry - (p.taken() - b.takenAtCarry); left > 0 {
			p.remove(left)
		}
		b.carry = 0
	}
	if !o.expiry.IsZero() && !now.Before(o.expiry) {
		p.gen.Add(1)
		p.remove(math.MaxInt64)
		o.expiry = 0
		if o.busy != nil {
			o.busy.carry = 0
		}
	}
	if p.flags.is(flagServed) && !now.Before(o.servedUntil) {
		p.flags.set(flagServed, false)
	}
}

// sample updates the key's demand rate (an EWMA over RateWindow) and the
// lease size that follows from it; it returns the tokens taken since the
// last sample.
func (m *Manager) sample(p *Pool, now mono) int64 {
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
		o.lastActive, o.askedAgain = now, true
	}
	alpha := 1 - math.Exp(-elapsed.Seconds()/m.cfg.RateWindow.Seconds())
	seen := float64(demand) / elapsed.Seconds()
	rate := float64(o.rate) + alpha*(seen-float64(o.rate))
	fast := 1 - math.Exp(-elapsed.Seconds()/(2*m.cfg.Sweep).Seconds())
	o.rate, o.fastRate = float32(rate), float32(float64(o.fastRate)+fast*(seen-float64(o.fastRate)))
	r := p.Rule()
	m.resize(p, r, rate*r.Lease.Refresh.Seconds())
	return took
}

// giveBack sends at once the renewal of a share whose key has gone quiet
// while other nodes hold it: it asks for no rate, so the share goes back to
// them within a few sweeps instead of at the lease's end.
func (m *Manager) giveBack(p *Pool, now mono) {
	o := &p.own
	if o.shareRate() <= 0 || o.inFlight != nil || o.givingBack || !m.quiet(p, p.Rule(), now) {
		return
	}
	if p.Holders() <= 1 { // nobody to give it to: it lapses with its lease (lapse)
		return
	}
	o.givingBack = true
	m.schedule(p, now)
}

// idle reports whether the key should leave: its rule is gone (nothing can
// be reported or returned for it any more), or it has had no demand for
// half a lease TTL and has nothing in flight or unreported.
func (m *Manager) idle(p *Pool, now mono) bool {
	if p.table.gone.Load() {
		return p.own.inFlight == nil
	}
	if p.own.inFlight != nil || p.own.unacked != nil || p.flags.is(flagQueued) || p.consumed.Load() > 0 {
		return false
	}
	return now.Sub(p.own.lastActive) >= idleAfter(p)
}

// idleAfter is how long a key without demand stays: half a lease TTL, and,
// if it has a fallback share or let one go before it was full, until that
// share would be full again (the rule's fill time): forgetting it earlier
// would hand the key a fresh burst.
func idleAfter(p *Pool) time.Duration {
	r := p.Rule()
	if p.fallback.Load() != nil || p.flags.is(flagRefilling) {
		return max(r.Lease.TTL/2, fillTime(r))
	}
	return r.Lease.TTL / 2
}

// drop forgets an emptied table of a rule that is gone.
func (m *Manager) drop(t *Table) {
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	if m.tables[t.name] == t {
		delete(m.tables, t.name)
	}
}
