package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

// BenchmarkTakeSlot is a slot taken and released on a leased key, against
// Allow on a leased key (BenchmarkAllow's) in the same run. The target is
// at most twice Allow's ns/op; the Slot TakeSlot returns is its one
// allocation.
func BenchmarkTakeSlot(b *testing.B) {
	a := memoryAllocator(b, benchRules+`
  - name: slots
    algorithm: concurrency
    limit: 1000000
`)
	c := newClient(b, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(b, c, "bench", "user-42")
	waitUntil(b, 5*time.Second, func() bool {
		s, err := c.TakeSlot(ctx, "slots", "user-42")
		s.Release()
		return err == nil && s.Mode() == client.ModeLease
	}, "a slot lease")
	b.Run("take_release", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := c.TakeSlot(ctx, "slots", "user-42")
			if err != nil {
				b.Fatal(err)
			}
			s.Release()
		}
	})
	b.Run("allow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !c.Allow(ctx, "bench", "user-42") {
				b.Fatal("refused")
			}
		}
	})
}
