package lease

import (
	"context"
	"errors"
	"log/slog"
	"math"
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
	// WantRate asks for a share of the rule's rate, tokens per second.
	WantRate float64
	// Returned gives back tokens a share earned beyond the pool's cap,
	// from the lease of epoch ReturnedEpoch.
	Returned, ReturnedEpoch int64
	// Seq numbers the key's requests: a retry carries the same, and the
	// allocator answers it again rather than applying it twice.
	Seq uint64
}

// Grant is the allocator's answer to one Request.
type Grant struct {
	Granted    int64
	Remaining  int64 // left centrally after the grant
	TTL        time.Duration
	RetryAfter time.Duration
	Holders    int
	Epoch      int64
	// Rate is the share of the rule's rate lent with the lease, tokens per
	// second, from the answer until the request's send time plus TTL.
	Rate float64
	// FullFor and FullInTTL: the central bucket had been full for FullFor
	// when the request arrived, and for FullInTTL at least, in all, of the
	// TTL before; see oweInFlight.
	FullFor, FullInTTL time.Duration
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

// Rejection is an Acquire error that retrying will not cure, and which of
// the call's requests it is about. It is ErrRejected for errors.Is.
type Rejection struct {
	// Request is the index of the one request the allocator refused, or -1
	// when it refused the call as a whole (a store error, a refused
	// identity).
	Request int
	Err     error
}

func (r *Rejection) Error() string        { return ErrRejected.Error() + ": " + r.Err.Error() }
func (r *Rejection) Unwrap() error        { return r.Err }
func (r *Rejection) Is(target error) bool { return target == ErrRejected }

// Hooks let the owner observe the manager; every field may be nil.
type Hooks struct {
	Acquired     func(keys int, wanted, granted int64, took time.Duration, err error)
	Released     func(keys int, tokens int64, err error)
	Reachable    func(up bool, cause error) // cause: the failure that made it unreachable
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
	// Sweep is how often the keys that hold a share of a rate earn it and
	// have their rate sampled; other keys cost the loop nothing until
	// something is due for them (a lease that ends, an idle check). Leases
	// are treated as ending one sweep early. default: 20ms
	Sweep time.Duration
	// BatchWindow is how long a refill waits for others to share its
	// Acquire. default: 1ms
	BatchWindow time.Duration
	// CallGap is the least time between two Acquire calls (unless one is
	// full, MaxBatch keys): under a flow of keys each asking once, calls
	// carry more keys each, and the store gets fewer. default: 5ms
	CallGap time.Duration
	// MaxBatch is the most keys in one Acquire or Release. default: 500
	MaxBatch int
	// MaxInFlight is the most Acquire calls the node has in flight; keys
	// that ask meanwhile wait for the next call. A flood of new keys then
	// makes a few full calls instead of many that the allocator sheds or
	// times out. default: 4
	MaxInFlight int
	// MaxKeys caps the pools the node holds, over all rules. A new key
	// beyond it gets no pool (Table.Pool says nil) until idle keys leave.
	// default: 1,000,000 (about 0.3 GB: BenchmarkKeyHeap, ~300 B a key)
	MaxKeys int
	// RPCTimeout bounds each call to the allocator; once a round trip is
	// measured, Acquire waits at least three of them, so that an allocator
	// far away is not taken for a dead one. default: 250ms
	RPCTimeout time.Duration
	// RateWindow is the time constant of each key's rate estimate.
	// default: 500ms
	RateWindow time.Duration
	// BackoffBase and BackoffMax bound the wait between attempts while the
	// allocator is unreachable (x1.6 per failure, 20% jitter). The maximum
	// is how late a node may notice that the allocator is back. default:
	// 50ms and 250ms
	BackoffBase, BackoffMax time.Duration
	// TokensOnly never asks for a share of a rule's rate: the node lives
	// on the tokens the allocator holds when it asks, as nodes did before
	// rate shares. A node far from the allocator then loses part of the
	// rate; the bench compares both. default: false, shares of token
	// buckets' rates
	TokensOnly bool
	// RoundTrip is the allocator's round trip as the owner measures it
	// (the slowest allocator's average); renewals leave early enough for
	// it. default: the manager's own average of Acquire calls
	RoundTrip func() time.Duration
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
	def(&c.CallGap, 5*time.Millisecond)
	def(&c.RPCTimeout, 250*time.Millisecond)
	def(&c.RateWindow, 500*time.Millisecond)
	def(&c.BackoffBase, 50*time.Millisecond)
	def(&c.BackoffMax, 250*time.Millisecond)
	if c.MaxBatch <= 0 {
		c.MaxBatch = 500
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = 1_000_000
	}
}

// Manager runs the lease loop of one node: one goroutine owns every pool's
// bookkeeping; RPCs run beside it and report back over a channel. Its work
// follows what is due: the keys holding a share every sweep, the others
// when a deadline of theirs comes (timers) or the hot path asks (inbox).
type Manager struct {
	cfg     Config
	clk     clock.Clock
	inbox   *inbox
	results chan result
	stop    chan struct{}
	done    chan struct{}
	rpcs    sync.WaitGroup
	calls   atomic.Int32 // Releases in flight and Acquires whose answer is not yet applied
	// acquiring counts Acquire calls in flight; the loop's.
	acquiring int
	keys      atomic.Int64 // pools held, over all tables
	overCap   atomic.Int64 // new keys refused a pool at MaxKeys
	down      atomic.Bool
	sync      chan chan struct{} // tests wait for the loop to catch up
	closing   sync.Once

	tablesMu sync.Mutex
	tables   map[string]*Table

	// mostHolders is the most holders seen on any key in the current and
	// the previous holdersWindow: a fleet size for nodes without gossip.
	mostHolders, mostHoldersBefore atomic.Int32
	holdersSince                   mono // start of the current window; the loop's

	// answered is closed, and replaced, each time the loop has applied an
	// Acquire's answer or failure: callers waiting for a first lease.
	answered atomic.Pointer[chan struct{}]

	// forgotten holds the tables of rules that went, for the loop to empty.
	forgotMu  sync.Mutex
	forgotten []*Table

	// owned by the loop
	pending     []*Pool
	flushAt     mono
	delayed     deadlines // keys' next requests
	timers      deadlines // keys' next bookkeeping
	sharing     poolSet   // keys holding a share: visited every sweep
	leaving     []*Pool   // evicted in this turn
	returns     []Return  // what evicted keys give back, for the next Release
	lastRelease mono
	backoff     time.Duration
	nextAttempt mono
	lastCall    mono          // when the last Acquire call went out
	refused     time.Duration // backoff after calls refused as a whole
	nextSweep   mono
	version     string
	rtt         time.Duration // average Acquire round trip
}

type result struct {
	pools   []*Pool
	grants  []Grant
	version string
	err     error
	took    time.Duration
}

// NewManager starts the lease loop; Close stops it.
func NewManager(cfg Config) *Manager {
	cfg.fill()
	m := &Manager{
		cfg: cfg, clk: cfg.Clock,
		inbox:   newInbox(),
		results: make(chan result, 64),
		delayed: deadlines{seq: func(p *Pool) *uint32 { return &p.own.delaySeq }},
		timers:  deadlines{seq: func(p *Pool) *uint32 { return &p.own.timerSeq }},
		sharing: newPoolSet(),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		sync:    make(chan chan struct{}),
		tables:  make(map[string]*Table),
	}
	m.nextSweep = m.now().Add(cfg.Sweep)
	first := make(chan struct{})
	m.answered.Store(&first)
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

// Forget drops the table of a rule that no longer exists; the loop takes
// its pools out and forgets what they held.
func (m *Manager) Forget(name string) {
	m.tablesMu.Lock()
	t, ok := m.tables[name]
	if ok {
		t.gone.Store(true)
	}
	m.tablesMu.Unlock()
	if ok {
		m.forgotMu.Lock()
		m.forgotten = append(m.forgotten, t)
		m.forgotMu.Unlock()
		m.inbox.put(nil)
	}
}

// now is the manager's time: the clock's monotonic reading as an instant.
// Leases, refills, retries and debts are all measured on it, so that a
// step of the wall clock moves none of them. It is never compared with the
// wall clock.
func (m *Manager) now() mono { return monoAt(m.clk.Mono()) }

// holdersWindow is how long a count of holders stands for the fleet's size:
// a fleet that shrinks is believed after one to two windows.
const holdersWindow = 5 * time.Minute

// sawHolders notes a grant's count of holders.
func (m *Manager) sawHolders(n int) {
	now := m.now()
	if now.Sub(m.holdersSince) >= holdersWindow {
		m.mostHoldersBefore.Store(m.mostHolders.Swap(0))
		m.holdersSince = now
	}
	if n32 := int32(min(n, math.MaxInt32)); n32 > m.mostHolders.Load() {
		m.mostHolders.Store(n32)
	}
}

// MostHolders is the most holders the allocator has counted on any key
// lately: the best size of the fleet a node without gossip knows.
func (m *Manager) MostHolders() int {
	return int(max(m.mostHolders.Load(), m.mostHoldersBefore.Load()))
}

// Keys is the number of pools the node holds, over all rules.
func (m *Manager) Keys() int { return int(m.keys.Load()) }

// OverCap is how many times a new key found the table full (MaxKeys).
func (m *Manager) OverCap() int64 { return m.overCap.Load() }

// Down reports whether the allocator is unreachable.
func (m *Manager) Down() bool { return m.down.Load() }

// Answered returns a channel that is closed once the next Acquire answer,
// or failure, has been applied to its pools.
func (m *Manager) Answered() <-chan struct{} { return *m.answered.Load() }

func (m *Manager) announce() {
	next := make(chan struct{})
	close(*m.answered.Swap(&next))
}

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
		case <-m.inbox.wake:
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
		now := m.now()
		m.turn(now)
		// A waiting test is told only once nothing is due at now: a turn
		// can leave work for this same instant (a key it scheduled now).
		for i := 0; synced != nil && i < 4; i++ {
			if wake, ok := m.nextWake(); !ok || wake.After(now) {
				break
			}
			m.turn(now)
		}
		timer.Stop()
		if wake, ok := m.nextWake(); ok {
			timer.Reset(max(wake.Sub(now), 0))
		}
		if synced != nil {
			close(synced)
		}
	}
}

// turn does what is due at now: the hot path's requests, the rules that
// went, the shares' sweep, the keys whose deadline came, and the requests
// to send.
func (m *Manager) turn(now mono) {
	for _, p := range m.inbox.take() {
		switch {
		case p == nil:
		case p.own.asleep:
			m.wake(p, now) // a Take found its share asleep (sleep.go)
		default:
			m.enqueue(p)
		}
	}
	m.forgetTables(now)
	if m.sharing.len() > 0 && !now.Before(m.nextSweep) {
		m.tick(now)
		m.nextSweep = now.Add(m.cfg.Sweep)
	}
	for {
		p, ok := m.timers.popDue(now)
		if !ok {
			break
		}
		p.own.timerAt = 0
		m.service(p, now)
	}
	m.flush(now)
	m.evict(now)
}

// nextWake is the earliest instant the loop has work without being told;
// none when nothing is due.
func (m *Manager) nextWake() (mono, bool) {
	var wake mono
	ok := false
	consider := func(at mono) {
		if !ok || at.Before(wake) {
			wake, ok = at, true
		}
	}
	if m.sharing.len() > 0 {
		consider(m.nextSweep)
	}
	if len(m.pending) > 0 && m.acquiring < m.cfg.MaxInFlight { // (else an answer wakes the loop)
		consider(m.flushAt)
	}
	if at, due := m.delayed.peek(); due {
		consider(at)
	}
	if at, due := m.timers.peek(); due {
		consider(at)
	}
	if len(m.returns) > 0 {
		consider(m.lastRelease.Add(releaseGap))
	}
	return wake, ok
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
