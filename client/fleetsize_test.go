package client_test

import (
	"context"
	"testing"

	"github.com/allot-dev/allot/client"
)

// A node configured with Allocators and NodeID only learns the fleet's
// size from its first GetRules (the allocator counts the nodes that asked
// for the rules), before any lease: cut off before its first one, its
// fallback divides by it, not by one.
func TestFirstRulesTellTheFleetsSize(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: "a"})
	b := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: "b"})
	a.Stop()
	// slow: 100 an hour, burst 100: b's fallback part of a fresh key is 50.
	d, err := b.AllowN(context.Background(), "slow", "fresh", 1)
	if err != nil || !d.Allowed || d.Mode != client.ModeFallback || d.Remaining != 49 {
		t.Fatalf("b's first decision with the allocator gone: %+v (%v), want allowed on its fallback with 49 of 50 left", d, err)
	}
}
