package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/slots"
	"github.com/allot-dev/allot/internal/upstream"
)

// Client is a node's limiter. It is safe for concurrent use; make one per
// process and Close it on shutdown.
type Client struct {
	cfg     Config
	allocs  *upstream.Conns
	api     allotv1.AllocatorClient  // on allocs: every call fails over
	leases  *upstream.LeaseTransport // the lease calls, on api
	mgr     *lease.Manager
	gossip  *fallback.Gossip
	metrics *metrics
	rtts    upstream.RoundTrips
	debts   lease.StrictDebts // strict rules' fallback admissions, to report
	// debtsFlushing says a report of debts is on its way (reportStrict).
	debtsFlushing atomic.Bool
	rules         atomic.Pointer[ruleSnapshot]
	closed        atomic.Bool
	// slots lease concurrency rules' slots; slotTables are their rules'
	// keys, by rule (slot.go).
	slots      *slots.Manager
	slotTables atomic.Pointer[map[string]*slots.Table]

	refresh chan struct{} // asks the rules loop to fetch now
	stop    chan struct{}
	done    sync.WaitGroup

	logLimit *bucket.TokenBucket // mode-change logs, a few per minute
}

// New connects to the allocators, fetches the rules (waiting at most
// StartTimeout) and starts the lease loop. An allocator that is unreachable
// is no error when Config.Rules is set: the node then decides by those, on
// its fallback allowances. Without them New fails with ErrNoRules: a node with
// no rules could only refuse every request.
func New(cfg Config) (*Client, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	var initial *rules.Set
	if len(cfg.Rules) > 0 {
		var err error
		if initial, err = toRuleSet(cfg.Rules); err != nil {
			return nil, err
		}
	}
	c := &Client{cfg: cfg, refresh: make(chan struct{}, 1), stop: make(chan struct{})}
	c.logLimit, _ = bucket.NewTokenBucketPer(3, 6, time.Minute, cfg.clock.Now())
	if err := c.dial(); err != nil {
		return nil, err
	}
	if err := c.joinGossip(); err != nil {
		c.allocs.Close()
		return nil, err
	}
	// Registered last, so that a New that failed can be tried again with
	// the same registerer.
	var err error
	if c.metrics, err = newMetrics(cfg.Registerer); err != nil {
		if c.gossip != nil {
			c.gossip.Leave(time.Second)
		}
		c.allocs.Close()
		return nil, err
	}
	c.rtts.Gauge = c.metrics.roundTrip
	c.allocs.SetMetrics(c.metrics.ejected, c.metrics.ejections)
	c.leases = c.leaseTransport()
	c.mgr = lease.NewManager(lease.Config{
		Transport: c.leases, Clock: cfg.clock, Logger: cfg.Logger, Nodes: c.fleetSize,
		RPCTimeout: cfg.RPCTimeout, Sweep: cfg.Lease.Sweep, BatchWindow: cfg.Lease.BatchWindow,
		TokensOnly: cfg.Lease.TokensOnly, RoundTrip: c.rtts.Slowest, Hooks: c.leaseHooks(), MaxKeys: cfg.Lease.MaxKeys,
	})
	c.startSlots()
	if err := c.metrics.watchKeys(c.mgr, c.slots); err != nil {
		c.mgr.Close(context.Background())
		c.slots.Close()
		c.metrics.unregister()
		if c.gossip != nil {
			c.gossip.Leave(time.Second)
		}
		c.allocs.Close()
		return nil, err
	}
	c.rules.Store(&ruleSnapshot{byName: map[string]*ruleState{}})
	if initial != nil {
		c.applyRules(initial)
	}
	if c.gossip != nil {
		c.discover()
		c.done.Add(1)
		go c.discoverLoop()
	}
	if len(cfg.Allocators) > 0 || c.gossip != nil {
		// Without rules of its own the node must have the allocator's: wait
		// the whole StartTimeout for one to come up, not just one dial.
		ctx, cancel := context.WithTimeout(context.Background(), cfg.StartTimeout)
		err := c.fetchRules(ctx, grpc.WaitForReady(initial == nil))
		cancel()
		if err != nil && len(c.rules.Load().byName) == 0 {
			c.Close()
			return nil, fmt.Errorf("client: %w: no allocator sent them within StartTimeout (%v), and Config.Rules is empty "+
				"(set it to start without an allocator): %v", ErrNoRules, cfg.StartTimeout, err)
		}
		if err != nil {
			cfg.Logger.Warn("allot: no rules from the allocator yet; using Config.Rules and retrying", "err", err)
		}
		c.done.Add(1)
		go c.rulesLoop()
	}
	return c, nil
}

func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	return fmt.Sprintf("%s-%d-%06x", host, os.Getpid(), rand.Uint32()&0xffffff)
}

func (c *Client) dial() error {
	opts := c.cfg.transportOptions()
	// A quarter of the shortest deadline the node gives a call (25ms by
	// default): a healthy allocator answers well within it, and a caller
	// whose own deadline leaves less makes a timeout no sign of sickness.
	patience := min(c.cfg.CheckTimeout, c.cfg.RPCTimeout) / 4
	c.allocs = upstream.New(append(opts, c.cfg.DialOptions...), c.cfg.clock, c.cfg.Logger, c.leaseTimeout, patience)
	c.api = allotv1.NewAllocatorClient(c.allocs)
	if err := c.allocs.Set(c.cfg.Allocators); err != nil {
		c.allocs.Close()
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// leaseTimeout is the deadline the lease manager gives an Acquire: at
// least three round trips to the slowest allocator.
func (c *Client) leaseTimeout() time.Duration {
	return max(c.cfg.RPCTimeout, 3*c.rtts.Slowest())
}

// leaseTransport carries the lease manager's calls over the connections.
// A call made while the manager thinks every allocator down waits for a
// connection; an allocator that no longer knows a rule makes the node
// fetch the rules again.

func (c *Client) leaseTransport() *upstream.LeaseTransport {
	return &upstream.LeaseTransport{API: c.api, NodeID: c.cfg.NodeID, RoundTrips: &c.rtts, Timed: c.metrics.rpc,
		Down: func() bool { return c.mgr.Down() }, RulesStale: c.requestRules}
}

// NodeID is this node's name.
func (c *Client) NodeID() string { return c.cfg.NodeID }

// Close returns every leased token, reports what was admitted outside
// leases, leaves the gossip pool and closes the connection. It waits at
// most five seconds for the allocator.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.stop)
	c.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	c.reportStrict(ctx)
	if c.slots != nil {
		c.slots.Close()
	}
	if c.mgr != nil {
		if err := c.mgr.Close(ctx); err != nil && !upstream.IsUnreachable(err) {
			errs = append(errs, fmt.Errorf("returning leases: %w", err))
		}
	}
	if c.gossip != nil {
		if err := c.gossip.Leave(time.Second); err != nil {
			errs = append(errs, fmt.Errorf("leaving gossip: %w", err))
		}
	}
	if err := c.allocs.Close(); err != nil {
		errs = append(errs, err)
	}
	c.metrics.unregister()
	if len(errs) > 0 {
		return fmt.Errorf("client: close: %w", errors.Join(errs...))
	}
	return nil
}

// logMode logs a change of mode, at most a few times a minute.
func (c *Client) logMode(msg string, args ...any) {
	if c.logLimit.Allow(c.cfg.clock.Now()) {
		c.cfg.Logger.Warn(msg, args...)
	}
}

// validKey is the allocator's rule for a key: 1 to 512 bytes of UTF-8. A
// key that is not UTF-8 cannot go on the wire (a protobuf string), so it
// could never be leased: it would run on the fallback allowance forever, on
// every node, and escape the global limit.
func validKey(key string) bool { return len(key) > 0 && len(key) <= maxKey && utf8.ValidString(key) }
