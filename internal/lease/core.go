package lease

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
)

// Core is a node's lease bookkeeping with no goroutine, clock or I/O of its
// own: every key's state machine, the batching of their requests and their
// deadlines. Whoever runs it (the Manager, or the simulator) calls Turn at
// the instants NextWake names and whenever the inbox wakes, sends the calls
// TakeCalls hands over, and brings their answers back with Answer. Its
// methods are for one goroutine at a time, but for the hot path's (Table,
// KeyLease) and those marked safe.
type Core struct {
	env
	inbox *inbox
	keys  atomic.Int64 // keys held, over all tables
	over  atomic.Int64 // new keys refused at MaxKeys
	// credited is the tokens ever put into the leases, over all tables:
	// grants and the rate shares' earnings, less what paid debts.
	credited atomic.Int64
	down     atomic.Bool
	// downUntil is how long the last failure is news (a mono instant):
	// the next attempt's instant and its deadline. Past it with no call
	// since, the node does not know whether the allocator is down
	// (DownAt).
	downUntil atomic.Int64
	// acquiring is how many Acquire calls are out: written by the one
	// goroutine, read by decisions (DownAt).
	acquiring atomic.Int32
	// failures is how many calls in a row timed out since the last
	// answer, 2 once one failed otherwise (DownForNew).
	failures atomic.Int32
	// fleet is the allocator's last count of live nodes.
	fleet atomic.Int32
	// windows is where the store's windows lie on this node's clock, as
	// the window grants tell (windows.go).
	windows atomic.Pointer[fallback.Windows]

	tablesMu sync.Mutex
	tables   map[string]*Table

	// mostHolders is the most holders seen on any key in the current and
	// the previous holdersWindow: a fleet size for nodes without gossip.
	mostHolders, mostHoldersBefore atomic.Int32
	// guess is the node's first guess of the store's clock (its wall less
	// its monotonic clock), nil until one is made: the windows a fallback
	// counts in while it knows no better (Windows).
	guess        atomic.Pointer[time.Duration]
	holdersSince mono

	// answered is closed, and replaced, each time an Acquire's answer or
	// failure has been applied: callers waiting for a first lease.
	answered atomic.Pointer[chan struct{}]

	// forgotten holds the tables of rules that went, for Turn to empty.
	forgotMu  sync.Mutex
	forgotten []*Table

	// The one goroutine's.
	pending     []*KeyLease
	flushAt     mono
	delayed     deadlines // keys' next requests
	timers      deadlines // keys' next bookkeeping
	sharing     keySet    // keys holding a share: visited every sweep
	leaving     []*KeyLease
	returns     []Return // what keys that left give back, for the next Release
	lastRelease mono
	backoff     time.Duration
	nextAttempt mono
	lastCall    mono
	refused     time.Duration // backoff after calls refused as a whole
	nextSweep   mono
	version     string
	first       int // pending keys whose first request it is (callers wait)
	calls       []*Call
	releases    [][]Return
}

// env is what a key's transitions read besides the key and the instant:
// the configuration, the random source and the measured round trip.
type env struct {
	cfg Config
	rng *rand.Rand
	rtt time.Duration // the average Acquire round trip
	// warned names the rules whose TTL was found too short for the round
	// trip, said once each.
	warned sync.Map
}

// Call is one Acquire the Core wants sent: its requests, one per key, and
// how long to wait for the answer.
type Call struct {
	Requests []Request
	Timeout  time.Duration
	keys     []*KeyLease
}

// NewCore returns a Core; Config.Transport and Config.Clock are not used.
func NewCore(cfg Config, now time.Duration) *Core {
	cfg.fill()
	c := &Core{
		env:     env{cfg: cfg, rng: cfg.Rand},
		inbox:   newInbox(),
		delayed: deadlines{seq: func(k *KeyLease) *uint32 { return &k.q.delaySeq }},
		timers:  deadlines{seq: func(k *KeyLease) *uint32 { return &k.q.timerSeq }},
		tables:  make(map[string]*Table),
	}
	c.nextSweep = monoAt(now).Add(cfg.Sweep)
	c.holdersSince = monoAt(now)
	first := make(chan struct{})
	c.answered.Store(&first)
	return c
}

// Table returns the table of r's name, giving it r as its current rule.
// Safe for concurrent use.
func (c *Core) Table(r *rules.Rule) *Table {
	c.tablesMu.Lock()
	defer c.tablesMu.Unlock()
	t, ok := c.tables[r.Name]
	if !ok || t.gone.Load() { // a rule that comes back starts afresh
		t = &Table{c: c, name: r.Name, keys: newKeyMap()}
		c.tables[r.Name] = t
	}
	t.rule.Store(r)
	return t
}

// Forget drops the table of a rule that no longer exists; the next Turn
// takes its keys out and forgets what they held. Safe for concurrent use.
func (c *Core) Forget(name string) {
	c.tablesMu.Lock()
	t, ok := c.tables[name]
	if ok {
		t.gone.Store(true)
	}
	c.tablesMu.Unlock()
	if ok {
		c.forgotMu.Lock()
		c.forgotten = append(c.forgotten, t)
		c.forgotMu.Unlock()
		c.inbox.put(nil)
	}
}

// holdersWindow is how long a count of holders stands for the fleet's size:
// a fleet that shrinks is believed after one to two windows.
const holdersWindow = 5 * time.Minute

// sawHolders notes a grant's count of holders.
func (c *Core) sawHolders(n int, now mono) {
	if now.Sub(c.holdersSince) >= holdersWindow {
		c.mostHoldersBefore.Store(c.mostHolders.Swap(0))
		c.holdersSince = now
	}
	if n32 := int32(min(n, math.MaxInt32)); n32 > c.mostHolders.Load() {
		c.mostHolders.Store(n32)
	}
}

// MostHolders is the most holders the allocator has counted on any key
// lately. Safe for concurrent use.
func (c *Core) MostHolders() int {
	return int(max(c.mostHolders.Load(), c.mostHoldersBefore.Load()))
}

// Fleet is the allocator's last count of live nodes, 0 when it has said
// none. Safe for concurrent use.
func (c *Core) Fleet() int { return int(c.fleet.Load()) }

// SawFleet records the allocator's count of live nodes from outside an
// Acquire (GetRules); 0 says nothing. Safe for concurrent use.
func (c *Core) SawFleet(n int) {
	if n > 0 {
		c.fleet.Store(int32(min(n, 1<<30)))
	}
}

// Keys is the number of keys held, over all rules. Safe for concurrent use.
func (c *Core) Keys() int { return int(c.keys.Load()) }

// Credited is how many tokens the allocator has put into the node's
// leases, granted or earned on rate shares, over all rules: the node's
// share, counted. Safe for concurrent use.
func (c *Core) Credited() int64 { return c.credited.Load() }

// OverCap is how many times a new key found the table full (MaxKeys).
func (c *Core) OverCap() int64 { return c.over.Load() }

// Down reports whether the allocator is unreachable: the last call failed.
// Safe for concurrent use.
func (c *Core) Down() bool { return c.down.Load() }

// DownAt reports whether, at now, a key may fall back for want of the
// allocator: the last call failed, and recently enough that a call made
// since would have failed too, or a call made since is still out (its
// answer or failure is the next news). A node whose keys all went quiet in an
// outage makes no call after it, and its last failure grows old: a new
// key then waits for its first lease (which fails at once if the outage
// goes on) rather than admit on a fallback the store never reserved,
// next to nodes the allocator serves (a node back from a cut admitted a
// new window key's fallback seconds after the cut ended: 6 of 5). Safe
// for concurrent use.
func (c *Core) DownAt(now time.Duration) bool {
	return c.down.Load() && (monoAt(now) < mono(c.downUntil.Load()) || c.acquiring.Load() > 0)
}

// DownForNew is DownAt for a key the allocator never answered for, which
// holds nothing the store reserves a fallback for: a call that timed out
// is news of an outage only once the next one has timed out too. One call
// past its deadline is as likely an allocator slow under load as one
// gone, and a cold fleet whose first calls timed out fell back beside the
// nodes the store served (126 of 100 passed a stampede, TestStampede). A
// call that failed otherwise (refused, no connection) is news at once.
// Safe for concurrent use.
func (c *Core) DownForNew(now time.Duration) bool {
	return c.failures.Load() >= 2 && c.DownAt(now)
}

// Answered returns a channel that is closed once the next Acquire answer,
// or failure, has been applied. Safe for concurrent use.
func (c *Core) Answered() <-chan struct{} { return *c.answered.Load() }

func (c *Core) announce() {
	next := make(chan struct{})
	close(*c.answered.Swap(&next))
}

// Wake is the channel the inbox signals when a key needs the Core.
func (c *Core) Wake() <-chan struct{} { return c.inbox.wake }

// Busy reports whether the inbox holds work.
func (c *Core) Busy() bool { return c.inbox.len() > 0 }

// Turn does what is due at now: the hot path's requests, the rules that
// went, the shares' sweep, the keys whose deadline came, and the requests
// and returns to send.
func (c *Core) Turn(at time.Duration) {
	now := monoAt(at)
	keys, spent := c.inbox.take()
	for _, k := range spent {
		// Cleared first: a token taken from now on is noted again, one
		// taken before is at or before now.
		k.lower(bitSpent)
		k.req.spentAt = now
	}
	for _, k := range keys {
		switch {
		case k == nil:
		case k.phase == phaseDormant:
			c.wake(k, now) // a Take found its share asleep (sleep.go)
		case k.lower(bitHurry):
			c.hurry(k, now)
		default:
			c.enqueue(k, now)
		}
	}
	c.forgetTables(now)
	if c.sharing.len() > 0 && !now.Before(c.nextSweep) {
		c.sweep(now)
		c.nextSweep = now.Add(c.cfg.Sweep)
	}
	for {
		k, ok := c.timers.popDue(now)
		if !ok {
			break
		}
		k.q.timerAt = 0
		c.visit(k, now)
	}
	c.flush(now)
	c.evict(now)
}

// NextWake is the earliest instant the Core has work without being told;
// false when nothing is due.
func (c *Core) NextWake() (time.Duration, bool) {
	var wake mono
	ok := false
	consider := func(at mono) {
		if !ok || at.Before(wake) {
			wake, ok = at, true
		}
	}
	if c.sharing.len() > 0 {
		consider(c.nextSweep)
	}
	if len(c.pending) > 0 && int(c.acquiring.Load()) < c.cfg.MaxInFlight { // (else an answer wakes it)
		consider(c.flushAt)
	}
	if at, due := c.delayed.peek(); due {
		consider(at)
	}
	if at, due := c.timers.peek(); due {
		consider(at)
	}
	if len(c.returns) > 0 {
		consider(c.lastRelease.Add(releaseGap))
	}
	return wake.sinceOrigin(), ok
}

// TakeCalls hands over the Acquire and Release calls to send.
func (c *Core) TakeCalls() ([]*Call, [][]Return) {
	calls, rels := c.calls, c.releases
	c.calls, c.releases = nil, nil
	return calls, rels
}

// tableList is every table, for Close.
func (c *Core) tableList() []*Table {
	c.tablesMu.Lock()
	defer c.tablesMu.Unlock()
	out := make([]*Table, 0, len(c.tables))
	for _, t := range c.tables {
		out = append(out, t)
	}
	return out
}

// drop forgets an emptied table of a rule that is gone.
func (c *Core) drop(t *Table) {
	c.tablesMu.Lock()
	defer c.tablesMu.Unlock()
	if c.tables[t.name] == t {
		delete(c.tables, t.name)
	}
}

// forgetTables takes the keys of rules that went out of their tables:
// nothing can be reported or returned for them any more.
func (c *Core) forgetTables(now mono) {
	c.forgotMu.Lock()
	tables := c.forgotten
	c.forgotten = nil
	c.forgotMu.Unlock()
	for _, t := range tables {
		for _, k := range t.sorted() {
			c.visit(k, now)
		}
		if t.Len() == 0 {
			c.drop(t)
		}
	}
}
