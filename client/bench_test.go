package client_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"

	"github.com/allot-dev/allot/client"
)

// A limit no benchmark reaches and leases so large that one lasts the whole
// run: every decision is an admission from a lease, and no refill competes
// with the benchmark for the machine's cores.
const benchRules = `
rules:
  - name: bench
    algorithm: token_bucket
    limit: 1000000000000
    period: 1s
    lease: { min: 100000000000, max: 100000000000, ttl: 1h, refresh: 1s }
  - name: spent
    algorithm: token_bucket
    limit: 1
    period: 1h
`

// BenchmarkAllow compares a decision on a leased key with
// golang.org/x/time/rate's Allow in the same run. The target is at most
// 0.3 of x/time/rate's ns/op, with 0 allocs/op.
func BenchmarkAllow(b *testing.B) {
	a := memoryAllocator(b, benchRules)
	c := newClient(b, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(b, c, "bench", "user-42")
	b.Run("allot_leased", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !c.Allow(ctx, "bench", "user-42") {
				b.Fatal("refused")
			}
		}
	})
	b.Run("x_time_rate", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Limit(1e12), 1e12)
		b.ReportAllocs()
		for b.Loop() {
			if !lim.Allow() {
				b.Fatal("refused")
			}
		}
	})
}

// BenchmarkAllowRefused is a refusal from a leased key whose lease is
// spent, against x/time/rate's refusal: the path a flood of refused callers
// takes, which yields its processor to the node's own loop (see decide).
func BenchmarkAllowRefused(b *testing.B) {
	a := memoryAllocator(b, benchRules)
	c := newClient(b, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(b, c, "spent", "user-42") // its one token, spent
	b.Run("allot_leased_spent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d, err := c.AllowN(ctx, "spent", "user-42", 1); err != nil || d.Allowed || d.Mode != client.ModeLease {
				b.Fatalf("%+v %v, want refused on the lease", d, err)
			}
		}
	})
	b.Run("x_time_rate", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Limit(1.0/3600), 1)
		lim.Allow()
		b.ReportAllocs()
		for b.Loop() {
			if lim.Allow() {
				b.Fatal("allowed")
			}
		}
	})
}

// BenchmarkWait is Wait on a leased key: the key's queue joined and left
// around one decision from the lease, for callers that shape rather than
// refuse.
func BenchmarkWait(b *testing.B) {
	a := memoryAllocator(b, benchRules)
	c := newClient(b, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(b, c, "bench", "user-42")
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Wait(ctx, "bench", "user-42"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowParallel spreads decisions over 1,024 leased keys from
// every core: no global lock, so it scales with cores.
func BenchmarkAllowParallel(b *testing.B) {
	a := memoryAllocator(b, benchRules)
	c := newClient(b, client.Config{Allocators: []string{a.Addr()}})
	const keys = 1024
	names := make([]string, keys)
	for i := range names {
		names[i] = "user-" + strconv.Itoa(i)
		leased(b, c, "bench", names[i])
	}
	ctx := context.Background()
	b.Run("allot_leased_1024_keys", func(b *testing.B) {
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine walks its own 64 keys: requests for one user
			// tend to land on one core, and a key's pool then stays in that
			// core's cache.
			base := int(seq.Add(1)) * 64
			for i := 0; pb.Next(); i++ {
				c.Allow(ctx, "bench", names[(base+i%64)%keys])
			}
		})
	})
	b.Run("x_time_rate_1024_limiters", func(b *testing.B) {
		lims := make([]*rate.Limiter, keys)
		for i := range lims {
			lims[i] = rate.NewLimiter(rate.Limit(1e12), 1e12)
		}
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			base := int(seq.Add(1)) * 64
			for i := 0; pb.Next(); i++ {
				lims[(base+i%64)%keys].Allow()
			}
		})
	})
}
