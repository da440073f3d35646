package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
)

// Client is a node's limiter. It is safe for concurrent use; make one per
// process and Close it on shutdown.
type Client struct {
	cfg     Config
	allocs  *allocators
	api     allotv1.AllocatorClient // on allocs: every call fails over
	mgr     *lease.Manager
	gossip  *fallback.Gossip
	metrics *metrics
	rtts    roundTrips
	debts   strictDebts // strict rules' fallback admissions, to report
	rules   atomic.Pointer[ruleTable]
	closed  atomic.Bool

	refresh chan struct{} // asks the rules loop to fetch now
	stop    chan struct{}
	done    sync.WaitGroup

	logLimit *bucket.TokenBucket // mode-change logs, a few per minute
}

// ruleTable is the immutable set of rules a decision reads.
type ruleTable struct {
	version string
	byName  map[string]*ruleState
}

// ruleState is one rule as this node applies it.
type ruleState struct {
	rule   *rules.Rule
	table  *lease.Table // nil for strict rules
	shares *fallback.Shares
	waits  *waitQueues
	counts *ruleCounters
}

// New connects to the allocators, fetches the rules (waiting at most
// StartTimeout) and starts the lease loop. An allocator that is unreachable
// is no error when Config.Rules is set: the node then decides by those, on
// its fallback shares. Without them New fails with ErrNoRules: a node with
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
	c.logLimit, _ = bucket.NewTokenBucketPer(3, 6, time.Minute, cfg.Clock.Now())
	if err := c.dial(); err != nil {
		return nil, err
	}
	if err := c.joinGossip(); err != nil {
		c.allocs.close()
		return nil, err
	}
	// Registered last, so that a New that failed can be tried again with
	// the same registerer.
	var err error
	if c.metrics, err = newMetrics(cfg.Registerer); err != nil {
		if c.gossip != nil {
			c.gossip.Leave(time.Second)
		}
		c.allocs.close()
		return nil, err
	}
	c.rtts.gauge = c.metrics.roundTrip
	c.allocs.setMetrics(c.metrics.ejected, c.metrics.ejections)
	c.mgr = lease.NewManager(lease.Config{
		Transport: grpcTransport{c}, Clock: cfg.Clock, Logger: cfg.Logger, Nodes: c.fleetSize,
		RPCTimeout: cfg.RPCTimeout, Sweep: cfg.Lease.Sweep, BatchWindow: cfg.Lease.BatchWindow,
		TokensOnly: cfg.Lease.TokensOnly, RoundTrip: c.rtts.slowest, Hooks: c.leaseHooks(), MaxKeys: cfg.Lease.MaxKeys,
	})
	if err := c.metrics.watchKeys(c.mgr); err != nil {
		c.mgr.Close(context.Background())
		c.metrics.unregister()
		if c.gossip != nil {
			c.gossip.Leave(time.Second)
		}
		c.allocs.close()
		return nil, err
	}
	c.rules.Store(&ruleTable{byName: map[string]*ruleState{}})
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
	opts := append(c.cfg.transportOptions(),
		// Reconnect quickly once an allocator is back: the default backoff
		// grows to two minutes, far longer than a lease, and nodes must
		// return to leases within a few refresh intervals.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}),
	)
	// A quarter of the shortest deadline the node gives a call (25ms by
	// default): a healthy allocator answers well within it, and a caller
	// whose own deadline leaves less makes a timeout no sign of sickness.
	patience := min(c.cfg.CheckTimeout, c.cfg.RPCTimeout) / 4
	c.allocs = newAllocators(append(opts, c.cfg.DialOptions...), c.cfg.Clock, c.cfg.Logger, c.leaseTimeout, patience)
	c.api = allotv1.NewAllocatorClient(c.allocs)
	if err := c.allocs.set(c.cfg.Allocators); err != nil {
		c.allocs.close()
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// leaseTimeout is the deadline the lease manager gives an Acquire: at
// least three round trips to the slowest allocator.
func (c *Client) leaseTimeout() time.Duration {
	return max(c.cfg.RPCTimeout, 3*c.rtts.slowest())
}

func (c *Client) joinGossip() error {
	g := c.cfg.Gossip
	if g == nil {
		return nil
	}
	gossip, err := fallback.Join(fallback.GossipConfig{Name: c.cfg.NodeID, Role: fallback.RoleNode,
		Bind: g.Bind, Join: g.Join, Fast: g.Fast, Keys: g.Keys, TrustAllocators: g.TrustAllocators, Logger: c.cfg.Logger})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	c.gossip = gossip
	return nil
}

// setAllocators makes addrs the allocators calls go to. With none, calls
// fail fast and the node runs on its fallback shares.
func (c *Client) setAllocators(addrs []string) {
	if err := c.allocs.set(addrs); err != nil {
		c.cfg.Logger.Warn("allot: dialing allocators", "err", err)
	}
}

// discover adds the allocators gossip knows to the configured ones.
func (c *Client) discover() {
	seen := map[string]bool{}
	var addrs []string
	for _, a := range append(slices.Clone(c.cfg.Allocators), c.gossip.Allocators()...) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	c.setAllocators(addrs)
}

// discoverLoop follows allocators joining and leaving the gossip pool.
func (c *Client) discoverLoop() {
	defer c.done.Done()
	t := c.cfg.Clock.NewTimer(discoverEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C():
			c.discover()
			t.Reset(discoverEvery)
		}
	}
}

// discoverEvery is how often the allocator list follows gossip: a failover
// to a new allocator waits at most this long beyond failure detection.
const discoverEvery = 500 * time.Millisecond

// GossipAddr is the address other nodes can join, or "" without gossip.
func (c *Client) GossipAddr() string {
	if c.gossip == nil {
		return ""
	}
	return c.gossip.Addr()
}

// NodeID is this node's name.
func (c *Client) NodeID() string { return c.cfg.NodeID }

// Rule returns the named rule as this node applies it (from the allocator,
// or from Config.Rules until the allocator's arrive).
func (c *Client) Rule(name string) (Rule, bool) {
	rs := c.rules.Load().byName[name]
	if rs == nil {
		return Rule{}, false
	}
	r := rs.rule
	out := Rule{Name: r.Name, Algorithm: r.Algorithm.String(), Limit: r.Limit, Period: r.Period, Burst: r.Burst,
		Failure: r.Failure.String(), Strict: r.Strict, LeaseMin: r.Lease.Min, LeaseMax: r.Lease.Max,
		LeaseTTL: r.Lease.TTL, LeaseRefresh: r.Lease.Refresh, Shadow: r.Shadow}
	for _, o := range r.Overrides {
		out.Overrides = append(out.Overrides, Override{Key: o.Key, Match: o.Match, Limit: o.Limit, Burst: o.Burst})
	}
	return out, true
}

// Nodes is the fleet size this node divides a rule's limit by when it
// falls back on a key it knows nothing about: live gossip nodes, else the
// most holders the allocator has counted on any key lately, at least
// Config.Nodes.
func (c *Client) Nodes() int { return c.fleetSize() }

// fleetSize is N before any key-specific hint.
func (c *Client) fleetSize() int { return c.nodesFor(0) }

// nodesFor is N for one key: gossip, else the largest of the allocator's
// holders count for the key, the most holders seen lately, and
// configuration (fallback.Nodes).
func (c *Client) nodesFor(holders int) int {
	gossip := 0
	if c.gossip != nil {
		gossip = c.gossip.Nodes()
	}
	return fallback.Nodes(gossip, holders, max(c.mgr.MostHolders(), c.mgr.Fleet()), c.cfg.Nodes)
}

func (c *Client) fetchRules(ctx context.Context, opts ...grpc.CallOption) error {
	resp, err := c.api.GetRules(ctx, &allotv1.GetRulesRequest{}, opts...)
	if err != nil {
		return err
	}
	if cur := c.rules.Load(); cur.version == resp.GetVersion() && resp.GetVersion() != "" {
		return nil
	}
	set, err := rules.FromProto(resp)
	if err != nil {
		return err
	}
	c.applyRules(set)
	return nil
}

// rulesLoop refetches the rules when the allocator reports a new version,
// on request, and every half minute; never twice within refetchGap, so that
// allocators that disagree about the rules (one failed its reload) cannot
// make the node apply one set, then the other, then the first again.
func (c *Client) rulesLoop() {
	defer c.done.Done()
	t := c.cfg.Clock.NewTimer(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.refresh:
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
		if err := c.fetchRules(ctx); err != nil {
			c.cfg.Logger.Debug("allot: fetching rules", "err", err)
		}
		cancel()
		t.Stop()
		t.Reset(refetchGap)
		select {
		case <-c.stop:
			return
		case <-t.C():
		}
		t.Reset(30*time.Second - refetchGap)
	}
}

// refetchGap is the least time between two fetches of the rules.
const refetchGap = 2 * time.Second

func (c *Client) requestRules() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// applyRules builds a new rule table; the keys of rules that stay keep
// their leases, the keys of rules that went are returned.
func (c *Client) applyRules(set *rules.Set) {
	old := c.rules.Load()
	next := &ruleTable{version: set.Version(), byName: make(map[string]*ruleState, set.Len())}
	for _, r := range set.Rules() {
		rs := &ruleState{rule: r, counts: c.metrics.rule(r.Name, r.Shadow), shares: &fallback.Shares{}, waits: &waitQueues{}}
		if prev, ok := old.byName[r.Name]; ok { // keep what callers are in the middle of
			rs.shares, rs.waits = prev.shares, prev.waits
		}
		if r.Leasable() {
			rs.table = c.mgr.Table(r)
		}
		next.byName[r.Name] = rs
	}
	for name, prev := range old.byName {
		if now, ok := next.byName[name]; !ok || (prev.table != nil && now.table == nil) {
			c.mgr.Forget(name)
		}
	}
	c.rules.Store(next)
	c.cfg.Logger.Info("allot: rules applied", "rules", set.Len(), "version", set.Version())
}

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
	if c.mgr != nil {
		if err := c.mgr.Close(ctx); err != nil && !isUnreachable(err) {
			errs = append(errs, fmt.Errorf("returning leases: %w", err))
		}
	}
	if c.gossip != nil {
		if err := c.gossip.Leave(time.Second); err != nil {
			errs = append(errs, fmt.Errorf("leaving gossip: %w", err))
		}
	}
	if err := c.allocs.close(); err != nil {
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
	if c.logLimit.Allow(c.cfg.Clock.Now()) {
		c.cfg.Logger.Warn(msg, args...)
	}
}

// validKey is the allocator's rule for a key: 1 to 512 bytes of UTF-8. A
// key that is not UTF-8 cannot go on the wire (a protobuf string), so it
// could never be leased: it would run on the fallback share forever, on
// every node, and escape the global limit.
func validKey(key string) bool { return len(key) > 0 && len(key) <= maxKey && utf8.ValidString(key) }
