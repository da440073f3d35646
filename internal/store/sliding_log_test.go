package store_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// logKey finds the Redis key that holds (r, key), whatever the layout's
// name for it, and fails unless there is exactly one.
func logKey(tb testing.TB, rdb *redis.Client, r *rules.Rule, key string) string {
	tb.Helper()
	keys, err := rdb.Keys(context.Background(), "allot:*:{"+r.Name+"|"+key+"}").Result()
	if err != nil || len(keys) != 1 {
		tb.Fatalf("keys of %s|%s: %v, %v; want one", r.Name, key, keys, err)
	}
	return keys[0]
}

// BenchmarkRedisCheckSlidingLog: what one admitted Check costs on a
// sliding log at the largest limit, by cost, each on a fresh key; and a
// refusal of the largest cost on a log full of single tokens, which must
// find when enough of them leave. redis-B/key is the key's MEMORY USAGE
// after one admitted call.
func BenchmarkRedisCheckSlidingLog(b *testing.B) {
	url := redistest.URL(b)
	s := dialRedis(b, url, store.RedisOptions{Timeout: 5 * time.Second})
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	// A period of a second: the fresh keys leave Redis soon after the run.
	r := newRule(b, rules.Rule{Name: "bench-log", Algorithm: rules.SlidingLog, Limit: rules.MaxSlidingLog, Period: time.Second})
	for _, cost := range []int64{1, 100, rules.MaxSlidingLog} {
		b.Run(fmt.Sprintf("cost=%d", cost), func(b *testing.B) {
			prefix := fmt.Sprintf("c%d-", cost)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				if d, err := s.Check(ctx, r, prefix+strconv.Itoa(i), cost); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			b.StopTimer()
			mem, err := rdb.MemoryUsage(ctx, logKey(b, rdb, r, prefix+strconv.Itoa(i)), 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(mem), "redis-B/key")
		})
	}
	b.Run(fmt.Sprintf("refused-cost=%d-on-%d-entries", rules.MaxSlidingLog, rules.MaxSlidingLog), func(b *testing.B) {
		full := newRule(b, rules.Rule{Name: "bench-full", Algorithm: rules.SlidingLog, Limit: rules.MaxSlidingLog, Period: time.Hour})
		for range rules.MaxSlidingLog {
			if d, err := s.Check(ctx, full, "k", 1); err != nil || !d.Allowed {
				b.Fatalf("%+v, %v", d, err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			if d, err := s.Check(ctx, full, "k", rules.MaxSlidingLog); err != nil || d.Allowed || d.RetryAfter <= 0 {
				b.Fatalf("%+v, %v", d, err)
			}
		}
		b.StopTimer()
		if err := rdb.Del(ctx, logKey(b, rdb, full, "k")).Err(); err != nil {
			b.Fatal(err)
		}
	})
}
