package allocator

// An allocator in the gossip pool advertises its gRPC address, for nodes
// and other allocators to find it; it leaves the pool as it drains.

import (
	"fmt"
	"net"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
)

// joinGossip advertises this allocator's gRPC address to the pool.
func (a *Allocator) joinGossip() error {
	if a.cfg.GossipBind == "" {
		return nil
	}
	advertise := a.cfg.Advertise
	if advertise == "" {
		host, _, _ := net.SplitHostPort(a.Addr())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("--gossip with --listen %s: give the address nodes should dial (--advertise)", a.Addr())
		}
		advertise = a.Addr()
	}
	g, err := fallback.Join(fallback.GossipConfig{Name: "allocator-" + advertise, Role: fallback.RoleAllocator,
		Bind: a.cfg.GossipBind, Join: a.cfg.GossipJoin, GRPC: advertise, Keys: a.gossipKeys, Logger: a.log})
	if err != nil {
		return fmt.Errorf("--gossip: %w", err)
	}
	a.gossip = g
	a.log.Info("gossip joined", "addr", g.Addr(), "advertise", advertise)
	return nil
}

func (a *Allocator) leaveGossip() {
	a.leaveOnce.Do(func() {
		if a.gossip != nil {
			if err := a.gossip.Leave(time.Second); err != nil {
				a.log.Warn("leaving gossip", "err", err)
			}
		}
	})
}

// GossipAddr is the address other members join, or "" without gossip.
func (a *Allocator) GossipAddr() string {
	if a.gossip == nil {
		return ""
	}
	return a.gossip.Addr()
}
