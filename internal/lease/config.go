package lease

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/clock"
)

// Hooks let the owner observe the manager; every field may be nil.
type Hooks struct {
	Acquired     func(keys int, wanted, granted int64, took time.Duration, err error)
	Released     func(keys int, tokens int64, err error)
	Reachable    func(up bool, cause error) // cause: the failure that made it unreachable
	RulesVersion func(version string)
	Taken        func(rule string, tokens int64) // lease admissions, summed per visit
}

// Config tunes a Manager (and the Core inside it). The zero value of each
// field means its default; DefaultConfig says each with its reason.
type Config struct {
	// Transport reaches the allocator. Required by NewManager; the Core
	// never calls it (it hands its calls to whoever runs it).
	Transport Transport
	// Clock drives the Manager's loop and timers. default: the machine's
	Clock  clock.Clock
	Hooks  Hooks
	Logger *slog.Logger
	// Rand draws the jitters and the keys' first sequence numbers; a seed
	// makes a Core's choices repeatable. default: seeded at random
	Rand *rand.Rand
	// Nodes is the node's estimate of the fleet size, used to size a new
	// key's first lease.
	Nodes func() int
	// Sweep is how often the keys that hold a share of a rate earn it and
	// have their rate sampled; other keys cost the loop nothing until
	// something is due for them. Leases are treated as ending one sweep
	// early.
	Sweep time.Duration
	// BatchWindow is how long a refill waits for others to share its
	// Acquire.
	BatchWindow time.Duration
	// CallGap is the least time between two Acquire calls (unless one is
	// full, MaxBatch keys): under a flow of keys each asking once, calls
	// carry more keys each, and the store gets fewer.
	CallGap time.Duration
	// MaxBatch is the most keys in one Acquire or Release.
	MaxBatch int
	// MaxInFlight is the most Acquire calls the node has in flight; keys
	// that ask meanwhile wait for the next call.
	MaxInFlight int
	// MaxKeys caps the keys the node holds, over all rules. A new key
	// beyond it gets no KeyLease (Table.Key says nil) until idle keys leave.
	MaxKeys int
	// RPCTimeout bounds each call to the allocator; once a round trip is
	// measured, Acquire waits at least three of them, so that an allocator
	// far away is not taken for a dead one.
	RPCTimeout time.Duration
	// RateWindow is the time constant of each key's rate estimate.
	RateWindow time.Duration
	// BackoffBase and BackoffMax bound the wait between attempts while the
	// allocator is unreachable (x1.6 per failure, 20% jitter). The maximum
	// is how late a node may notice that the allocator is back.
	BackoffBase, BackoffMax time.Duration
	// TokensOnly never asks for a share of a rule's rate: the node lives
	// on the tokens the allocator holds when it asks. A node far from the
	// allocator then loses part of the rate; the bench compares both.
	TokensOnly bool
	// RoundTrip is the allocator's round trip as the owner measures it
	// (the slowest allocator's average); renewals leave early enough for
	// it. default: the Core's own average of Acquire calls
	RoundTrip func() time.Duration
}

// DefaultConfig is the configuration every zero field takes.
func DefaultConfig() Config {
	return Config{
		Nodes:       func() int { return 1 }, // alone until told otherwise (client.Config.Nodes, gossip)
		Sweep:       20 * time.Millisecond,   // a share earns in steps of a fiftieth of a second
		BatchWindow: time.Millisecond,        // a refill waits this long for company
		CallGap:     5 * time.Millisecond,    // at most 200 calls a second from one node
		MaxBatch:    500,                     // a call the allocator answers in a few ms
		MaxInFlight: 4,                       // a flood of new keys makes a few full calls, not many shed ones
		MaxKeys:     1_000_000,               // about half a GB at the bench's heap per live key (docs/bench.md)
		RPCTimeout:  250 * time.Millisecond,  // a LAN allocator answers in a few ms
		RateWindow:  500 * time.Millisecond,  // demand estimates follow load within a second
		BackoffBase: 50 * time.Millisecond,   // retry soon after a blip
		BackoffMax:  250 * time.Millisecond,  // and notice a recovery within a quarter second
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if c.Nodes == nil {
		c.Nodes = d.Nodes
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	dur(&c.Sweep, d.Sweep)
	dur(&c.BatchWindow, d.BatchWindow)
	dur(&c.CallGap, d.CallGap)
	dur(&c.RPCTimeout, d.RPCTimeout)
	dur(&c.RateWindow, d.RateWindow)
	dur(&c.BackoffBase, d.BackoffBase)
	dur(&c.BackoffMax, d.BackoffMax)
	num := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	num(&c.MaxBatch, d.MaxBatch)
	num(&c.MaxInFlight, d.MaxInFlight)
	num(&c.MaxKeys, d.MaxKeys)
}
