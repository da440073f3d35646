package allocator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

const benchRules = `
rules:
  - name: bench
    algorithm: token_bucket
    limit: 1000000000000
    period: 1s
  - name: strict
    algorithm: token_bucket
    limit: 1000000000000
    period: 1s
`

// benchAllocator serves on the memory store, or on Redis when url is set.
func benchAllocator(b *testing.B, url string) allotv1.AllocatorClient {
	set, err := rules.Parse("bench", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	_, conn := start(b, allocator.Config{Rules: set, RedisURL: url})
	return allotv1.NewAllocatorClient(conn)
}

func stores(b *testing.B) map[string]string {
	return map[string]string{"memory": "", "redis": redistest.URL(b)}
}

// BenchmarkAcquire is one Acquire call through gRPC, for batches of 1 and
// 32 keys; for Redis it also reports the commands one batch costs.
func BenchmarkAcquire(b *testing.B) {
	for name, url := range stores(b) {
		api := benchAllocator(b, url)
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", name, batch), func(b *testing.B) {
				req := &allotv1.AcquireRequest{NodeId: "bench-node"}
				for i := range batch {
					req.Requests = append(req.Requests, &allotv1.LeaseRequest{Rule: "bench", Key: fmt.Sprintf("k%d", i), Want: 100})
				}
				before := commands(b, url)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := api.Acquire(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/key")
				if url != "" {
					b.ReportMetric(float64(commands(b, url)-before)/float64(b.N), "redis-cmds/batch")
				}
			})
		}
	}
}

// BenchmarkCheck is one Check call through gRPC.
func BenchmarkCheck(b *testing.B) {
	for name, url := range stores(b) {
		api := benchAllocator(b, url)
		b.Run(name, func(b *testing.B) {
			req := &allotv1.CheckRequest{Rule: "strict", Key: "k"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := api.Check(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// commands counts the commands Redis has run, scripts' own included.
func commands(b *testing.B, url string) int64 {
	if url == "" {
		return 0
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		var calls int64
		fmt.Sscanf(line[strings.Index(line, "calls=")+len("calls="):], "%d", &calls)
		total += calls
	}
	return total
}
