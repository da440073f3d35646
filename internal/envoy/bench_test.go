package envoy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/store"
)

// benchRules give Check and ShouldRateLimit the same limit, a fixed window
// too large to refuse during a run: the benchmark measures decisions.
func benchRules(domain string) string {
	return fmt.Sprintf(`
rules:
  - name: %s
    algorithm: fixed_window
    limit: 4000000000
    period: 24h
envoy:
  domains:
    - domain: %s
      descriptors:
        - key: user
          rate_limit: { unit: day, requests_per_unit: 4000000000 }
`, domain, domain)
}

// BenchmarkShouldRateLimitVsCheck compares one Envoy decision with one
// Allocator.Check through a real gRPC listener on 127.0.0.1, on the same
// allocator and store: one descriptor against one rule, the same key.
// serial is the latency of one caller; parallel the throughput of many.
func BenchmarkShouldRateLimitVsCheck(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		mem := store.NewMemory(clock.Real())
		defer mem.Close()
		benchStore(b, mem)
	})
	b.Run("redis", func(b *testing.B) {
		s, err := store.DialRedis(redistest.URL(b), store.RedisOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchStore(b, s)
	})
}

func benchStore(b *testing.B, s store.Store) {
	domain := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	r := serve(b, allocator.Config{Rules: parse(b, benchRules(domain)), Store: s, MaxInFlight: -1})
	conn, err := grpc.NewClient(r.a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	api := allotv1.NewAllocatorClient(conn)
	rls := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("user=alice")}}
	check := &allotv1.CheckRequest{Rule: domain, Key: "alice", Cost: 1}
	calls := map[string]func(ctx context.Context) error{
		"ShouldRateLimit": func(ctx context.Context) error {
			resp, err := rls.ShouldRateLimit(ctx, req)
			if err == nil && resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
				err = fmt.Errorf("refused: %v", resp)
			}
			return err
		},
		"Check": func(ctx context.Context) error {
			resp, err := api.Check(ctx, check)
			if err == nil && !resp.GetAllowed() {
				err = fmt.Errorf("refused: %v", resp)
			}
			return err
		},
	}
	for _, name := range []string{"ShouldRateLimit", "Check"} {
		call := calls[name]
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if err := call(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
