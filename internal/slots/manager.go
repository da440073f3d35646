package slots

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// Request asks for slots of one key: Want in all, keeping Kept of those
// held (allotv1.LeaseRequest's want and slots_kept), numbered Seq. A
// release gives back every slot of the key.
type Request struct {
	Rule, Key  string
	Want, Kept int64
	// Seq numbers the key's requests, each above the one before (the
	// store applies none at or below one it applied: a duplicate, or a
	// request that came after the next; store/core_concurrency.go). It is
	// the node's wall clock in µs, or one more than the last if that is
	// not more, so that a node back from a restart with the same id
	// numbers its requests above those of the process before it.
	Seq int64
}

// Grant is the allocator's answer to one Request.
type Grant struct {
	Granted, Share int64
	TTL            time.Duration
}

// Transport carries the manager's calls to the allocators.
type Transport interface {
	Acquire(ctx context.Context, reqs []Request) ([]Grant, error)
	Release(ctx context.Context, reqs []Request) error
}

// Config wires a Manager.
type Config struct {
	Transport Transport
	Clock     clock.Clock
	// Nodes is the fleet's size, that the fallback divides the limit by.
	Nodes func() int
	// Unreachable tells an allocator that could not answer (the node falls
	// back) from one that refused the request (it does not).
	Unreachable func(error) bool
	// Timeout bounds each call.
	Timeout func() time.Duration
	// Alone says the node has no allocator to ask (none configured, no
	// gossip): every key is on its fallback from the start.
	Alone bool
	// Taken counts, from the loop, the slots taken on a rule since it last
	// looked, by the mode they were taken in (near enough: a key's mode
	// as it looks). default: none
	Taken func(rule string, n int64, mode Mode)
	// Tick is how often the loop looks at every key. default: 10ms
	Tick time.Duration
	// MaxKeys caps the keys the node holds slots of, over all rules: a new
	// key beyond it gets no Key (Table.Key says nil) until idle keys go.
	// 0: no cap.
	MaxKeys int
	// Stepped starts no loop and makes no call: the caller drives the
	// Manager with Turn and Answer (answer.go).
	Stepped bool
	Logger  *slog.Logger
}

// Manager runs the loop that leases, renews, gives back and expires the
// slots of every key a node takes slots on.
type Manager struct {
	cfg    Config
	mu     sync.Mutex
	tables map[string]*Table
	gone   []*Table    // forgotten rules' tables with slots still in flight
	down   atomic.Bool // the newest call answered found no allocator
	// reachSent is when the call that last set down was sent (under mu).
	reachSent time.Duration
	kick      chan struct{}
	stop      chan struct{}
	done      sync.WaitGroup
	sends     sync.WaitGroup
	queued    [][]Request  // Stepped: releases for the caller to make
	keys      atomic.Int64 // keys held, over all tables
	over      atomic.Int64 // new keys refused at MaxKeys
}

var errShortAnswer = errors.New("slots: the allocator answered fewer leases than asked")

// Table is one rule's keys.
type Table struct {
	m    *Manager
	rule atomic.Pointer[rules.Rule]
	keys *keyMap
}

// NewManager starts the loop; Close stops it.
func NewManager(cfg Config) *Manager {
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{cfg: cfg, tables: map[string]*Table{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	m.down.Store(cfg.Alone)
	if !cfg.Stepped {
		m.done.Add(1)
		go m.loop()
	}
	return m
}

// Table returns r's table, keeping the keys of a rule of that name.
func (m *Manager) Table(r *rules.Rule) *Table {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tables[r.Name]
	if t == nil {
		t = &Table{m: m, keys: newKeyMap()}
		m.tables[r.Name] = t
	}
	t.rule.Store(r)
	return t
}

// Forget drops a rule that went: its idle keys' slots go back now, the
// others' end with their leases.
func (m *Manager) Forget(name string) {
	m.mu.Lock()
	t := m.tables[name]
	delete(m.tables, name)
	if t != nil {
		m.gone = append(m.gone, t)
	}
	rets := m.dropGone(m.cfg.Clock.Mono())
	m.mu.Unlock()
	m.release(rets)
}

// Lookup returns the key's slots if the node has them.
func (t *Table) Lookup(key string) *Key { return t.keys.load(key) }

// Key returns the key's slots, adding the key (its first lease asked for
// at once) if the node has none; nil when the key is new and the node
// holds Config.MaxKeys keys.
func (t *Table) Key(key string) *Key {
	if k := t.Lookup(key); k != nil && !k.Dead() {
		return k
	}
	k := newKey()
	k.st = state{rule: t.rule.Load(), name: key, first: make(chan struct{})}
	t.m.mu.Lock()
	if o := t.keys.load(key); o != nil && !o.Dead() {
		t.m.mu.Unlock()
		return o
	}
	if limit := t.m.cfg.MaxKeys; limit > 0 && t.m.keys.Load() >= int64(limit) {
		t.m.mu.Unlock()
		t.m.over.Add(1)
		return nil
	}
	t.m.keys.Add(1)
	k.ref = refs.add(k)
	if t.m.cfg.Alone { // nobody to ask: the fallback at once
		k.st.answered = true
		close(k.st.first)
		t.m.settle(k, t.m.cfg.Clock.Mono(), allocatorAway)
	}
	t.keys.store(k)
	t.m.mu.Unlock()
	select {
	case t.m.kick <- struct{}{}:
	default:
	}
	return k
}

// First is closed once the key's first lease has been answered, or could
// not be.
func (k *Key) First() <-chan struct{} { return k.st.first }

// Keys is how many keys the node holds slots of, over all rules.
func (m *Manager) Keys() int { return int(m.keys.Load()) }

// OverCap is how many times a new key found the node at Config.MaxKeys.
func (m *Manager) OverCap() int64 { return m.over.Load() }

// Down reports whether the last call found no allocator.
func (m *Manager) Down() bool { return m.down.Load() }

func (m *Manager) loop() {
	defer m.done.Done()
	t := m.cfg.Clock.NewTimer(m.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-t.C():
			t.Reset(m.cfg.Tick)
		}
		m.tick()
	}
}

// tick looks at every key once and makes the calls it asks for: the
// releases, then the leases, each call on its own goroutine.
func (m *Manager) tick() {
	rets, calls := m.look()
	for _, r := range rets {
		m.release(r)
	}
	for _, c := range calls {
		m.sends.Add(1)
		go m.send(c)
	}
}

// look looks at every key once: its averages, its cap, whether it went
// idle, and whether it asks the allocator; one call carries every ask (up
// to maxBatch keys). It returns the releases and the calls to make, in
// batches; it does no I/O.
func (m *Manager) look() (rets [][]Request, calls []*Call) {
	now := m.cfg.Clock.Mono()
	down := m.down.Load()
	var reqs []Request
	var keys []*Key
	var drops []Request
	m.mu.Lock()
	for _, t := range m.tables {
		r := t.rule.Load()
		t.keys.each(func(k *Key) {
			k.st.rule = r
			if n := k.st.sample(now, k); n > 0 && m.cfg.Taken != nil {
				m.cfg.Taken(r.Name, n, k.Mode())
			}
			// What it had in flight at most since the loop last looked,
			// kept for its next request.
			peak := k.peak.Swap(k.InFlight())
			k.st.busy = peak > 0 || k.touched.Load()
			k.st.peak = max(k.st.peak, peak)
			m.settle(k, now, allocatorIs(down))
			if m.idle(k, now) {
				if ret, ok := m.drop(t, k, now, dropIdle); ok {
					drops = append(drops, ret)
				}
				return
			}
			if !m.cfg.Alone && k.st.due(now, k, down) {
				reqs = append(reqs, m.ask(k, now))
				keys = append(keys, k)
			}
			k.touched.Store(false)
		})
	}
	drops = append(drops, m.dropGone(now)...)
	m.mu.Unlock()
	for len(drops) > 0 {
		n := min(len(drops), maxBatch)
		rets = append(rets, drops[:n])
		drops = drops[n:]
	}
	for len(reqs) > 0 { // the allocator takes maxBatch keys a call at most
		n := min(len(reqs), maxBatch)
		calls = append(calls, &Call{Requests: reqs[:n], keys: keys[:n], sent: now})
		reqs, keys = reqs[n:], keys[n:]
	}
	return rets, calls
}

// maxBatch is the most keys one call carries: below the allocator's
// input limit (server.Limits.MaxBatch, 1000).
const maxBatch = 500

// ask builds the key's request, under m.mu: the slots it would hold, and
// those it keeps, the cap lowered to them first so that none is taken
// beyond what the store keeps for it. Slots in flight beyond them are not
// the lease's (its fallback's, taken before the lease came: the store
// kept none of them), and the cap is not raised to them.
func (m *Manager) ask(k *Key, now time.Duration) Request {
	st := &k.st
	inFlight := k.InFlight()
	peak := max(st.peak, inFlight)
	st.peak = 0
	want := target(st.rule, st.held, peak, k.refused.Swap(0), inFlight)
	var kept int64
	switch {
	case st.leased(now):
		kept = k.setCap(min(k.Cap(), st.held, want), ModeLease)
	case st.recorded(now):
		kept = min(inFlight, st.held)
	}
	st.asking, st.sent, st.givenUp = true, now, k.givenUp.Load()
	st.seq = max(st.seq+1, m.cfg.Clock.Now().UnixMicro())
	return Request{Rule: st.rule.Name, Key: st.name, Want: max(want, kept), Kept: kept, Seq: st.seq}
}

// send makes one call and takes its answers.
func (m *Manager) send(c *Call) {
	defer m.sends.Done()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout())
	grants, err := m.cfg.Transport.Acquire(ctx, c.Requests)
	cancel()
	m.answer(c, grants, err)
}

// release gives slots back, best effort: what does not arrive ends with
// its lease.
func (m *Manager) release(rets []Request) {
	if len(rets) == 0 {
		return
	}
	if m.cfg.Stepped {
		m.mu.Lock()
		m.queued = append(m.queued, rets)
		m.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout())
	defer cancel()
	if err := m.cfg.Transport.Release(ctx, rets); err != nil {
		m.cfg.Logger.Debug("allot: giving slots back", "err", err)
	}
}

// Close stops the loop and gives back the slots of every key with none in
// flight; the others' end with their leases.
func (m *Manager) Close() {
	close(m.stop)
	m.done.Wait()
	m.sends.Wait()
	m.mu.Lock()
	var rets []Request
	now := m.cfg.Clock.Mono()
	for _, t := range m.tables {
		t.keys.each(func(k *Key) {
			if ret, ok := m.drop(t, k, now, dropClosed); ok {
				rets = append(rets, ret)
			}
		})
	}
	m.mu.Unlock()
	m.release(rets)
}
