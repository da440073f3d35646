package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// Allocators advertise themselves through gossip: a node given no address
// finds them, and fails over when the one it used leaves.
func TestNodesFindAllocatorsThroughGossip(t *testing.T) {
	set, err := rules.Parse("test", []byte(apiRules))
	if err != nil {
		t.Fatal(err)
	}
	url := redistest.Start(t).URL()
	serve := func(join []string) *allocator.Allocator {
		a, err := allocator.New(allocator.Config{Rules: set, RedisURL: url, StoreTimeout: time.Second,
			GossipBind: "127.0.0.1:0", GossipJoin: join})
		if err != nil {
			t.Fatal(err)
		}
		go a.Serve()
		t.Cleanup(a.Stop)
		return a
	}
	first := serve(nil)
	second := serve([]string{first.GossipAddr()})
	c := newClient(t, client.Config{Gossip: &client.GossipConfig{Fast: true, Join: []string{second.GossipAddr()}}})
	leased(t, c, "fast", "k")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Leases keep coming from the second allocator: a strict decision,
	// which needs an allocator for every request, shows it.
	waitUntil(t, 10*time.Second, func() bool {
		d, err := c.AllowN(context.Background(), "login", "eve", 1)
		return err == nil && d.Mode == client.ModeStrict
	}, "strict decisions from the remaining allocator")
	if c.Nodes() != 1 {
		t.Fatalf("the node counts %d nodes; allocators must not count", c.Nodes())
	}
}
