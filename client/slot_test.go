package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/client"
)

const slotRules = `
rules:
  - name: cc
    algorithm: concurrency
    limit: 3
  - name: cc-closed
    algorithm: concurrency
    limit: 4
    failure: closed
  - name: tb
    algorithm: token_bucket
    limit: 10
    period: 1s
`

func TestTakeSlot(t *testing.T) {
	a := memoryAllocator(t, slotRules)
	reg := prometheus.NewRegistry()
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: "n1", Registerer: reg})
	ctx := context.Background()
	var held []*client.Slot
	waitUntil(t, 5*time.Second, func() bool {
		s, err := c.TakeSlot(ctx, "cc", "k")
		if err == nil {
			held = append(held, s)
		}
		return len(held) == 3
	}, "three slots")
	_, err := c.TakeSlot(ctx, "cc", "k")
	var se *client.SlotError
	if !errors.Is(err, client.ErrNoSlot) || !errors.As(err, &se) || se.RetryAfter <= 0 || se.Mode != client.ModeLease {
		t.Fatalf("a fourth slot of 3: %v, want a SlotError with a RetryAfter from the lease", err)
	}
	held[0].Release()
	held[0].Release() // once only
	s, err := c.TakeSlot(ctx, "cc", "k")
	if err != nil || s.Mode() != client.ModeLease {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := c.TakeSlot(ctx, "cc", "k"); !errors.Is(err, client.ErrNoSlot) {
		t.Fatalf("a second Release gave a slot back twice: %v", err)
	}
	// Takes are counted by the loop, refusals as they happen.
	waitUntil(t, 5*time.Second, func() bool {
		return counterSum(t, reg, "allot_client_decisions_total", "result", "allowed") >= 4
	}, "four slots taken, counted")
	if n := counterSum(t, reg, "allot_client_decisions_total", "result", "denied"); n < 2 {
		t.Errorf("%v refusals counted, want 2 at least", n)
	}
	for _, tc := range []struct {
		rule, key string
		want      error
	}{
		{"nope", "k", client.ErrUnknownRule},
		{"tb", "k", client.ErrNotConcurrency},
		{"cc", "", client.ErrInvalidKey},
	} {
		if _, err := c.AllowN(ctx, "cc", "k", 1); !errors.Is(err, client.ErrConcurrencyRule) {
			t.Errorf("AllowN on a concurrency rule: %v, want ErrConcurrencyRule", err)
		}
		if _, err := c.TakeSlot(ctx, tc.rule, tc.key); !errors.Is(err, tc.want) {
			t.Errorf("TakeSlot(%q, %q): %v, want %v", tc.rule, tc.key, err, tc.want)
		}
	}
}

// With the allocator gone, a node falls back on limit/N in flight
// (Config.Nodes here), and a closed rule refuses.
func TestTakeSlotFallback(t *testing.T) {
	c := newClient(t, client.Config{Allocators: []string{deadAddr(t)}, Nodes: 2, NodeID: "alone",
		StartTimeout: 50 * time.Millisecond, RPCTimeout: 50 * time.Millisecond,
		Rules: []client.Rule{{Name: "cc", Algorithm: "concurrency", Limit: 5}, {Name: "shut", Algorithm: "concurrency", Limit: 4, Failure: "closed"}}})
	ctx := context.Background()
	var held []*client.Slot
	waitUntil(t, 5*time.Second, func() bool {
		if s, err := c.TakeSlot(ctx, "cc", "k"); err == nil {
			if s.Mode() != client.ModeFallback {
				t.Fatalf("slot from %v, want the fallback", s.Mode())
			}
			held = append(held, s)
		}
		return len(held) == 2
	}, "the fallback's two slots (5/2)")
	var se *client.SlotError
	if _, err := c.TakeSlot(ctx, "cc", "k"); !errors.As(err, &se) || se.Mode != client.ModeFallback {
		t.Fatalf("a third slot on a fallback of 2: %v", err)
	}
	if _, err := c.AllowN(ctx, "cc", "k", 1); !errors.Is(err, client.ErrConcurrencyRule) {
		t.Errorf("AllowN on a concurrency rule, allocator gone: %v, want ErrConcurrencyRule", err)
	}
	if c.Allow(ctx, "cc", "k") {
		t.Error("Allow on a concurrency rule admitted")
	}
	for range 3 {
		if s, err := c.TakeSlot(ctx, "shut", "k"); err == nil {
			t.Fatalf("a closed rule gave a slot from %v with the allocator gone", s.Mode())
		}
	}
}
