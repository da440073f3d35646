package lease

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// Request asks the allocator for a lease on one key.
type Request struct {
	Rule, Key      string
	Want, Consumed int64
	ConsumedAge    time.Duration // since the first consumed token was admitted
}

// Grant is the allocator's answer to one Request.
type Grant struct {
	Granted    int64
	Remaining  int64 // left centrally after the grant
	TTL        time.Duration
	RetryAfter time.Duration
	Holders    int
	Epoch      int64
}

// Return gives unused tokens back.
type Return struct {
	Rule, Key     string
	Tokens, Epoch int64
}

// Transport reaches the allocator. Acquire returns one grant per request,
// in order, and the allocator's rules version.
type Transport interface {
	Acquire(ctx context.Context, reqs []Request) ([]Grant, string, error)
	Release(ctx context.Context, rets []Return) error
}

// ErrRejected wraps an Acquire error that retrying will not cure (a bad
// request or an unknown rule); the manager does not treat it as an outage.
var ErrRejected = errors.New("lease: request rejected by the allocator")

// Hooks let the owner observe the manager; every field may be nil.
type Hooks struct {
	Acquired     func(keys int, wanted, granted int64, took time.Duration, err error)
	Released     func(keys int, tokens int64, err error)
	Reachable    func(up bool)
	RulesVersion func(version string)
	Taken        func(rule string, tokens int64) // lease admissions, summed per sweep
}

// Config tunes a Manager. The zero value of each field means its default.
type Config struct {
	Transport Transport // required
	Clock     clock.Clock
	Hooks     Hooks
	Logger    *slog.Logger
	// Nodes is the node's estimate of the fleet size, used to size a new
	// key's first lease. default: 1
	Nodes func() int
	// Sweep is how often leases are expired, rates sampled and idle keys
	// returned. Leases are treated as ending one sweep early so that no
	// token outlives its TTL. default: 20ms
	Sweep time.Duration
	// BatchWindow is how long a refill waits for others to share its
	// Acquire. default: 1ms
	BatchWindow time.Duration
	// MaxBatch is the most keys in one Acquire or Release. default: 1000
	MaxBatch int
	// RPCTimeout bounds each call to the allocator. default: 250ms
	RPCTimeout time.Duration
	// RateWindow is the time constant of each key's rate estimate.
	// default: 500ms
	RateWindow time.Duration
	// BackoffBase and BackoffMax bound the wait between attempts while the
	// allocator is unreachable (x1.6 per failure, 20% jitter). The maximum
	// is how late a node may notice that the allocator is back. default:
	// 50ms and 250ms
	BackoffBase, BackoffMax time.Duration
}

func (c *Config) fill() {
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Nodes == nil {
		c.Nodes = func() int { return 1 }
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Sweep, 20*time.Millisecond)
	def(&c.BatchWindow, time.Millisecond)
	def(&c.RPCTimeout, 250*time.Millisecond)
	def(&c.RateWindow, 500*time.Millisecond)
	def(&c.BackoffBase, 50*time.Millisecond)
	def(&c.BackoffMax, 250*time.Millisecond)
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
}

// Manager runs the lease loop of one node: one goroutine owns every pool's
// bookkeeping; RPCs run beside it and report back over a channel.
type Manager struct {
	cfg     Config
	clk     clock.Clock
	signals chan *Pool
	results chan result
	stop    chan struct{}
	done    chan struct{}
	rpcs    sync.WaitGroup
	calls   atomic.Int32 // RPCs in flight
	down    atomic.Bool
	sync    chan chan struct{} // tests wait for the loop to catch up
	closing sync.Once

	tablesMu sync.Mutex
	tables   map[string]*Table

	// owned by the loop
	pending     []*Pool
	flushAt     time.Time
	delayed     delayQueue
	backoff     time.Duration
	nextAttempt time.Time
	nextSweep   time.Time
	version     string
}

type result struct {
	pools   []*Pool
	grants  []Grant
	version string
	err     error
}

// NewManager starts the lease loop; Close stops it.
func NewManager(cfg Config) *Manager {
	cfg.fill()
	m := &Manager{
		cfg: cfg, clk: cfg.Clock,
		signals: make(chan *Pool, 4096),
		results: make(chan result, 64),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		sync:    make(chan chan struct{}),
		tables:  make(map[string]*Table),
	}
	m.nextSweep = m.clk.Now().Add(cfg.Sweep)
	go m.loop()
	return m
}

// Table returns the table of r's name, giving it r as its current rule.
func (m *Manager) Table(r *rules.Rule) *Table {
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	t, ok := m.tables[r.Name]
	if !ok || t.gone.Load() { // a rule that comes back starts afresh
		t = &Table{m: m, name: r.Name, keys: newKeyMap()}
		m.tables[r.Name] = t
	}
	t.rule.Store(r)
	return t
}

// Forget drops the table of a rule that no longer exists; its pools are
// returned at the next sweep.
func (m *Manager) Forget(name string) {
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	if t, ok := m.tables[name]; ok {
		t.gone.Store(true)
	}
}

// Down reports whether the allocator is unreachable.
func (m *Manager) Down() bool { return m.down.Load() }

func (m *Manager) tableList() []*Table {
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	out := make([]*Table, 0, len(m.tables))
	for _, t := range m.tables {
		out = append(out, t)
	}
	return out
}

func (m *Manager) loop() {
	defer close(m.done)
	timer := m.clk.NewTimer(m.cfg.Sweep)
	defer timer.Stop()
	for {
		var synced chan struct{}
		select {
		case p := <-m.signals:
			m.enqueue(p)
		case r := <-m.results:
			m.apply(r)
		case <-timer.C():
		case synced = <-m.sync:
			// A test waits for the loop: do what a fired timer asks first.
			select {
			case <-timer.C():
			default:
			}
		case <-m.stop:
			return
		}
		now := m.clk.Now()
		if !now.Before(m.nextSweep) {
			m.sweep(now)
			m.nextSweep = now.Add(m.cfg.Sweep)
		}
		m.flush(now)
		timer.Stop()
		timer.Reset(max(m.nextWake().Sub(now), 0))
		if synced != nil {
			close(synced)
		}
	}
}

// nextWake is the earliest instant the loop has work without a signal.
func (m *Manager) nextWake() time.Time {
	wake := m.nextSweep
	if len(m.pending) > 0 && m.flushAt.Before(wake) {
		wake = m.flushAt
	}
	if at, ok := m.delayed.peek(); ok && at.Before(wake) {
		wake = at
	}
	return wake
}

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

func (m *Manager) schedule(p *Pool, at time.Time) {
	if len(m.pending) == 0 || at.Before(m.flushAt) {
		m.flushAt = at
	}
	m.pending = append(m.pending, p)
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
		f := &flight{want: p.own.size, sent: now}
		f.consumed, f.age = p.takeConsumed(now)
		p.own.inFlight = f
		reqs[i] = Request{Rule: p.table.name, Key: p.key, Want: f.want, Consumed: f.consumed, ConsumedAge: f.age}
	}
	m.rpcs.Add(1)
	m.calls.Add(1)
	go func() {
		defer m.rpcs.Done()
		defer m.calls.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RPCTimeout)
		defer cancel()
		start := time.Now()
		grants, version, err := m.cfg.Transport.Acquire(ctx, reqs)
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
			h(len(reqs), wanted, granted, time.Since(start), err)
		}
		// Delivered even after Close began: Close applies what calls in
		// flight bring, so that their grants are returned too.
		m.results <- result{pools: pools, grants: grants, version: version, err: err}
	}()
}

func (m *Manager) apply(r result) {
	now := m.clk.Now()
	if r.err != nil {
		m.failed(r, now)
		return
	}
	m.reachable(true)
	m.backoff = 0
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
	m.reachable(false)
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

func (m *Manager) reachable(up bool) {
	if m.down.Swap(!up) == up { // the state changed
		if h := m.cfg.Hooks.Reachable; h != nil {
			h(up)
		}
	}
}

// grant puts a lease into its pool.
func (m *Manager) grant(p *Pool, g Grant, now time.Time) {
	f := p.own.inFlight
	p.own.inFlight, p.own.solo = nil, false
	r := p.table.Rule()
	p.holders.Store(int32(min(g.Holders, math.MaxInt32)))
	p.remaining.Store(g.Remaining)
	p.fresh.Store(true)
	// The TTL runs from when the request was sent, on this node's monotonic
	// clock, and ends a sweep early: the sweep is when tokens are removed. A
	// lease shorter than two sweeps (a window about to end) ends at half its
	// TTL instead, and the next sweep is brought forward to meet it.
	margin := min(m.cfg.Sweep, g.TTL/2)
	expiry := f.sent.Add(g.TTL - margin)
	if margin < m.cfg.Sweep && expiry.Before(m.nextSweep) {
		m.nextSweep = expiry
	}
	p.own.servedUntil = f.sent.Add(g.TTL)
	p.served.Store(true)
	if g.Granted > 0 && expiry.After(now) {
		m.deposit(p, payInFlight(p, g.Granted), expiry)
		p.own.epoch = g.Epoch
	}
	next := now
	if g.Granted < f.want {
		next = now.Add(retryDelay(r, g.RetryAfter))
	}
	p.notBefore.Store(next.UnixNano())
	p.queued.Store(false)
}

// retryDelay paces a key whose lease fell short, because the allocator had
// too few tokens or kept some for the key's other holders: it asks again
// after a refresh interval, or later if the allocator says tokens will take
// longer (within a TTL). Under contention the fleet then makes about one
// call per node and interval, and the tokens wait for it centrally; asking
// sooner would only take other holders' shares. But the wait stays under
// half the time the central bucket takes to fill, or tokens would spill
// over its capacity between calls and be lost.
// payInFlight pays, from a lease just granted, for what the key admitted
// from its fallback share while the request was in flight: the allocator
// counted only the consumption the request carried, so the rest must come
// out of these tokens, or a new key could pass its limit by what it
// admitted in one round trip. It returns the tokens left to deposit.
func payInFlight(p *Pool, granted int64) int64 {
	for {
		c := p.consumed.Load()
		use := min(max(c, 0), granted)
		if use == 0 {
			return granted
		}
		if p.consumed.CompareAndSwap(c, c-use) {
			if c == use {
				p.consumedSince.Store(0)
			}
			return granted - use
		}
	}
}

// A jitter of ±25% keeps nodes that starved together from asking together:
// with ±10% or none, the bench saw them lock in phase and admit in waves of
// one refresh interval.
func retryDelay(r *rules.Rule, retryAfter time.Duration) time.Duration {
	fill := time.Duration(float64(r.Capacity()) / r.Rate() * float64(time.Second))
	d := max(min(max(retryAfter, r.Lease.Refresh), r.Lease.TTL, fill/2), time.Millisecond)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// deposit adds tokens that die at expiry. What older leases left keeps its
// own, earlier expiry (see carry), so no token outlives its lease.
func (m *Manager) deposit(p *Pool, n int64, expiry time.Time) {
	if left := max(p.tokens.Load(), 0); left > 0 && !p.own.expiry.IsZero() {
		// A carry still pending dies earlier than the current lease; all that
		// is left now takes that earlier expiry, which is conservative.
		if p.own.carry == 0 {
			p.own.carryExpiry = p.own.expiry
		}
		p.own.carry = left
		p.own.takenAtCarry = p.taken()
	}
	p.tokens.Add(n)
	p.own.credited += n
	p.own.expiry = expiry
}

func (m *Manager) init(p *Pool, now time.Time) {
	if p.own.initialized {
		return
	}
	r := p.table.Rule()
	p.own.initialized = true
	p.own.lastSample, p.own.lastActive = now, now
	// Before any rate is known, ask for this node's share of one refresh
	// interval: a hot new key needs it, a cold one returns it when idle.
	share := r.Rate() * r.Lease.Refresh.Seconds() / float64(max(m.cfg.Nodes(), 1))
	m.resize(p, r, share)
}

func (m *Manager) resize(p *Pool, r *rules.Rule, tokens float64) {
	size := min(max(int64(math.Ceil(tokens)), r.Lease.Min), r.Lease.Max)
	p.own.size = size
	p.low.Store((size + 1) / 2)
}

// Close stops the loop, waits for calls in flight, reports consumption and
// returns every leased token, within ctx.
func (m *Manager) Close(ctx context.Context) error {
	first := false
	m.closing.Do(func() { first = true })
	if !first {
		return nil
	}
	close(m.stop)
	<-m.done
	waited := make(chan struct{})
	go func() { m.rpcs.Wait(); close(waited) }()
	for {
		select {
		case r := <-m.results:
			m.apply(r)
			continue
		case <-waited:
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	for len(m.results) > 0 {
		m.apply(<-m.results)
	}
	return m.returnAll(ctx)
}
