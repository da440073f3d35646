package client

// The node in its fleet: the gossip pool it joins, the allocators found
// there, and the fleet size N its fallback allowances divide a limit by.

import (
	"fmt"
	"slices"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
)

func (c *Client) joinGossip() error {
	g := c.cfg.Gossip
	if g == nil {
		return nil
	}
	bind := g.Bind
	if bind == "" {
		bind = DefaultGossipConfig().Bind
	}
	gossip, err := fallback.Join(fallback.GossipConfig{Name: c.cfg.NodeID, Role: fallback.RoleNode,
		Bind: bind, Join: g.Join, Fast: g.Fast, Keys: g.Keys, TrustAllocators: g.TrustAllocators, Logger: c.cfg.Logger})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	c.gossip = gossip
	return nil
}

// setAllocators makes addrs the allocators calls go to. With none, calls
// fail fast and the node runs on its fallback allowances.
func (c *Client) setAllocators(addrs []string) {
	if err := c.allocs.Set(addrs); err != nil {
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
	t := c.cfg.clock.NewTimer(discoverEvery)
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
