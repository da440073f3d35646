package lease

import (
	"container/heap"
	"context"
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

// evict takes the pools out of their tables and returns their tokens. A
// Take racing with the eviction fails on the sentinel and looks again.
func (m *Manager) evict(pools []*Pool) {
	rets := make([]Return, 0, len(pools))
	for _, p := range pools {
		if ret, ok := m.leave(p); ok {
			rets = append(rets, ret)
		}
	}
	if len(rets) == 0 {
		return
	}
	m.rpcs.Add(1)
	m.calls.Add(1)
	go func() {
		defer m.rpcs.Done()
		defer m.calls.Add(-1)
		m.release(context.Background(), rets)
	}()
}

// leave takes p out of its table for good and says what to give back: the
// tokens of its lease and what its share earned beyond the pool's cap.
func (m *Manager) leave(p *Pool) (Return, bool) {
	left := p.tokens.Swap(evicted)
	p.table.keys.remove(p.key, p)
	p.sharing.Store(false)
	o := &p.own
	tokens := o.overflow
	if left > 0 && !o.expiry.IsZero() {
		tokens += left
	}
	o.overflow, o.share = 0, 0
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
	var rets []Return
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

// delayQueue holds keys whose next request must wait (a short grant's
// retry-after, a share's renewal), earliest first. Only a pool's newest
// entry is live: pushing it again, or scheduling it, leaves the older ones
// stale, and they are skipped.
type delayQueue struct{ items delayHeap }

type delayed struct {
	at  time.Time
	p   *Pool
	seq uint64
}

type delayHeap []delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (q *delayQueue) push(p *Pool, at time.Time) {
	p.own.delaySeq++
	heap.Push(&q.items, delayed{at: at, p: p, seq: p.own.delaySeq})
}

// dropStale pops the stale entries at the top.
func (q *delayQueue) dropStale() {
	for len(q.items) > 0 && q.items[0].seq != q.items[0].p.own.delaySeq {
		heap.Pop(&q.items)
	}
}

func (q *delayQueue) peek() (time.Time, bool) {
	q.dropStale()
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].at, true
}

func (q *delayQueue) popDue(now time.Time) (*Pool, bool) {
	q.dropStale()
	if len(q.items) == 0 || q.items[0].at.After(now) {
		return nil, false
	}
	return heap.Pop(&q.items).(delayed).p, true
}
