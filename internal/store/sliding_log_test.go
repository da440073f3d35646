package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/clock"
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

func rawClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// logEntries reads a sliding log's members, oldest first, and the tokens
// they hold.
func logEntries(t *testing.T, rdb *redis.Client, key string) (members []redis.Z, tokens int64) {
	t.Helper()
	members, err := rdb.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		parts := strings.Split(m.Member.(string), ":")
		if len(parts) != 3 {
			t.Fatalf("member %q is not <µs>:<n>:<last>", m.Member)
		}
		n, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || parts[2] != strconv.FormatFloat(m.Score, 'f', -1, 64) {
			t.Fatalf("member %q scored %v: want <µs>:<n>:<score>", m.Member, m.Score)
		}
		tokens += n
	}
	return members, tokens
}

// TestRedisSlidingLogEntryPerRequest: a sliding log keeps one entry per
// admitted request, whatever its cost, so that a Check of the largest cost
// writes one small member rather than one per token; entries logged within
// one microsecond stay distinct; a full log refuses.
func TestRedisSlidingLogEntryPerRequest(t *testing.T) {
	url := redistest.URL(t)
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)) // one instant throughout
	s := fakeClockRedis(t, url, clk)
	rdb := rawClient(t, url)
	ctx := context.Background()
	r := newRule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: rules.MaxSlidingLog, Period: hour})

	if d, err := s.Check(ctx, r, "big", rules.MaxSlidingLog); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost %d: %+v, %v", rules.MaxSlidingLog, d, err)
	}
	key := logKey(t, rdb, r, "big")
	if members, tokens := logEntries(t, rdb, key); len(members) != 1 || tokens != rules.MaxSlidingLog {
		t.Fatalf("a Check of cost %d left %d entries holding %d tokens, want 1 holding %d", rules.MaxSlidingLog, len(members), tokens, rules.MaxSlidingLog)
	}
	if mem, err := rdb.MemoryUsage(ctx, key, 0).Result(); err != nil || mem > 512 {
		t.Fatalf("a Check of cost %d takes %d bytes of Redis (%v), want at most 512", rules.MaxSlidingLog, mem, err)
	}

	costs := []int64{3, 1, 1, rules.MaxSlidingLog - 7, 2}
	for _, cost := range costs {
		if d, err := s.Check(ctx, r, "k", cost); err != nil || !d.Allowed {
			t.Fatalf("cost %d: %+v, %v", cost, d, err)
		}
	}
	members, tokens := logEntries(t, rdb, logKey(t, rdb, r, "k"))
	if len(members) != len(costs) || tokens != rules.MaxSlidingLog {
		t.Fatalf("%d requests in one µs left %d entries holding %d tokens, want %d holding %d: %v",
			len(costs), len(members), tokens, len(costs), rules.MaxSlidingLog, members)
	}
	for _, cost := range []int64{1, 0} {
		if d, err := s.Check(ctx, r, "k", cost); err != nil || d.Allowed != (cost == 0) || d.Remaining != 0 {
			t.Fatalf("full log, cost %d: %+v, %v", cost, d, err)
		}
	}
	if d, err := s.Check(ctx, r, "k", 4); err != nil || d.Allowed || d.RetryAfter != hour {
		t.Fatalf("full log, cost 4: %+v, %v; want a retry when the first request's 3 and the next 1 leave, in an hour", d, err)
	}
	if members, _ := logEntries(t, rdb, logKey(t, rdb, r, "k")); len(members) != len(costs) {
		t.Fatalf("refusals and a cost of 0 changed the log: %v", members)
	}
}

// TestRedisSlidingLogIgnoresOldLayout: a key of the layout of one member
// per token ("sl", before this version), left by allocators not yet
// upgraded in a rolling deploy, is neither read nor changed.
func TestRedisSlidingLogIgnoresOldLayout(t *testing.T) {
	url := redistest.URL(t)
	s := dialRedis(t, url, store.RedisOptions{Timeout: time.Second})
	rdb := rawClient(t, url)
	ctx := context.Background()
	r := newRule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 5, Period: hour})
	old := "allot:sl:{" + r.Name + "|k}"
	now := time.Now().UnixMicro()
	for i := 1; i <= 5; i++ {
		rdb.ZAdd(ctx, old, redis.Z{Score: float64(now), Member: fmt.Sprintf("%d:%d", now, i)})
	}
	rdb.Expire(ctx, old, time.Minute)
	if d, err := s.Check(ctx, r, "k", 5); err != nil || !d.Allowed {
		t.Fatalf("check beside an old-layout key: %+v, %v", d, err)
	}
	if n, err := rdb.ZCard(ctx, old).Result(); err != nil || n != 5 {
		t.Fatalf("the old-layout key holds %d members (%v), want its 5", n, err)
	}
	if n, err := rdb.Exists(ctx, "allot:sl2:{"+r.Name+"|k}").Result(); err != nil || n != 1 {
		t.Fatalf("no log at allot:sl2:{%s|k} (%v)", r.Name, err)
	}
}

// TestRedisSlidingLogRenumbers: a log whose token numbers near 2^50 (a key
// that never empties under heavy traffic) is numbered from 1 again when it
// takes an entry, with the same decisions: scores are doubles, exact only
// below 2^53. The state is written as that layout stores it.
func TestRedisSlidingLogRenumbers(t *testing.T) {
	url := redistest.URL(t)
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := fakeClockRedis(t, url, clk)
	rdb := rawClient(t, url)
	ctx := context.Background()
	r := newRule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 10, Period: hour})
	key := "allot:sl2:{" + r.Name + "|k}"
	now := clk.Now().UnixMicro()
	const top = 1 << 50
	for _, e := range []struct{ at, n, last int64 }{{now - 30, 3, top - 4}, {now - 20, 2, top - 2}, {now - 10, 2, top}} {
		rdb.ZAdd(ctx, key, redis.Z{Score: float64(e.last), Member: fmt.Sprintf("%d:%d:%d", e.at, e.n, e.last)})
	}
	rdb.Expire(ctx, key, time.Hour)
	if d, err := s.Check(ctx, r, "k", 3); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("7 of 10 logged, cost 3: %+v, %v", d, err)
	}
	members, tokens := logEntries(t, rdb, key)
	var scores []float64
	for _, m := range members {
		scores = append(scores, m.Score)
	}
	if fmt.Sprint(scores) != "[3 5 7 10]" || tokens != 10 {
		t.Fatalf("after the entry past 2^50 the scores are %v holding %d tokens, want [3 5 7 10] holding 10", scores, tokens)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
		t.Fatalf("renumbered log has PTTL %v (%v), want a TTL", ttl, err)
	}
	// 4 more must wait for the 3 at now-30 and the 2 at now-20.
	if d, err := s.Check(ctx, r, "k", 4); err != nil || d.Allowed || d.RetryAfter != hour-20*time.Microsecond {
		t.Fatalf("cost 4 on a full log: %+v, %v; want a retry in an hour less 20µs", d, err)
	}
}

// TestSlidingLogDropsMany: entries leave exactly a period after their
// stamp, however many leave at once, and a refusal's retry is when the
// last of the tokens that must leave does; on both stores, whose searches
// over the entries differ (a bisection in core.go; a gallop, then a
// bisection over ranks in the script).
func TestSlidingLogDropsMany(t *testing.T) {
	url := redistest.URL(t)
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			clk := clock.NewFake(t0)
			var s store.Store
			if name == "memory" {
				m := store.NewMemory(clk)
				t.Cleanup(func() { m.Close() })
				s = m
			} else {
				s = fakeClockRedis(t, url, clk)
			}
			r := newRule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 3000, Period: hour})
			to := func(at time.Time) { clk.Advance(at.Sub(clk.Now())) }
			check := func(cost int64) store.Decision {
				t.Helper()
				d, err := s.Check(context.Background(), r, "k", cost)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			// 100 entries at t0, 100 a minute later, 50 of 2 tokens at two minutes.
			for _, g := range []struct{ entries, cost int64 }{{100, 1}, {100, 1}, {50, 2}} {
				for range g.entries {
					if d := check(g.cost); !d.Allowed {
						t.Fatalf("%+v", d)
					}
				}
				clk.Advance(time.Minute)
			}
			to(t0.Add(hour - time.Microsecond))
			if d := check(0); d.Remaining != 2700 {
				t.Fatalf("a µs before the first entries leave: %+v, want 2700 remaining", d)
			}
			to(t0.Add(hour))
			if d := check(0); d.Remaining != 2800 {
				t.Fatalf("when the first 100 entries leave: %+v, want 2800 remaining", d)
			}
			// 2,950 more need the 100 tokens of t0+1m and 50 of t0+2m gone.
			if d := check(2950); d.Allowed || d.RetryAfter != 2*time.Minute || d.ResetAfter != 2*time.Minute {
				t.Fatalf("cost 2950: %+v, want a retry and a reset in 2m", d)
			}
			to(t0.Add(hour + 2*time.Minute))
			if d := check(2950); !d.Allowed || d.Remaining != 50 {
				t.Fatalf("cost 2950 when the rest have left: %+v, want 50 remaining", d)
			}
		})
	}
}

// TestRedisSlidingLogMatchesMemory drives sliding logs on both stores from
// one fake clock that moves in minutes, and back now and then, over logs of
// an hour: entries leave in any number at a time, requests of any cost and
// reports of any age meet logs of many entries, full or not, and every
// number of every answer must match. (The parity tests' logs never drop an
// entry.)
//
// The clock moves in whole minutes, or seconds, so that entries often leave
// exactly at the clock's instant, and so that a key Redis expires on its
// real clock has a TTL of a second at least: the test never lets that much
// real time pass without moving the fake clock past it. It steps back only
// where no log expired in between: the memory store's sweeper may have
// dropped such a log at the later instant, while Redis keeps it until the
// script drops its entries, which after the step it does not.
func TestRedisSlidingLogMatchesMemory(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	url := redistest.URL(t)
	red := fakeClockRedis(t, url, clk)
	rdb := rawClient(t, url)
	ctx := context.Background()
	type log struct {
		rule    *rules.Rule
		maxCost int64 // of most requests
	}
	logs := []log{ // the first, the busiest, holds up to ~100 entries
		{newRule(t, rules.Rule{Name: "log-many", Algorithm: rules.SlidingLog, Limit: 150, Period: hour}), 3},
		{newRule(t, rules.Rule{Name: "log-small", Algorithm: rules.SlidingLog, Limit: 7, Period: hour}), 3},
		{newRule(t, rules.Rule{Name: "log-large", Algorithm: rules.SlidingLog, Limit: 400, Period: hour}), 60},
	}
	keys := []string{"k0", "k1"}
	peak := clk.Now()
	// expiredSince reports whether a log's newest entry left after at.
	expiredSince := func(at time.Time) bool {
		for _, l := range logs {
			for _, k := range keys {
				newest, err := rdb.ZRange(ctx, "allot:sl2:{"+l.rule.Name+"|"+k+"}", -1, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(newest) == 1 {
					us, _ := strconv.ParseInt(strings.Split(newest[0], ":")[0], 10, 64)
					if end := time.UnixMicro(us).Add(l.rule.Period); end.After(at) && !end.After(peak) {
						return true
					}
				}
			}
		}
		return false
	}
	random := func(max time.Duration) time.Duration {
		unit := time.Minute
		if rng.IntN(4) == 0 {
			unit = time.Second
		}
		return time.Duration(rng.Int64N(int64(max/unit)+1)) * unit
	}
	refused := 0
	for step := range 2000 {
		switch n := rng.IntN(10); {
		case n < 3:
			clk.Advance(random(8 * time.Minute))
			if clk.Now().After(peak) {
				peak = clk.Now()
			}
		case n == 3:
			if back := random(5 * time.Minute); !expiredSince(clk.Now().Add(-back)) {
				clk.Advance(-back)
			}
		}
		l, key := logs[0], keys[0]
		if rng.IntN(2) == 0 {
			l, key = logs[rng.IntN(len(logs))], keys[rng.IntN(len(keys))]
		}
		r := l.rule
		var memOut, redOut string
		if rng.IntN(8) == 0 {
			req := []store.AcquireRequest{{Rule: r, Key: key, Node: "n", Consumed: rng.Int64N(r.Limit/2 + 2),
				ConsumedAge: random(90 * time.Minute)}}
			ml, merr := mem.Acquire(ctx, req)
			rl, rerr := red.Acquire(ctx, req)
			memOut = fmt.Sprintf("report %d age %v: %+v %v", req[0].Consumed, req[0].ConsumedAge, ml, merr)
			redOut = fmt.Sprintf("report %d age %v: %+v %v", req[0].Consumed, req[0].ConsumedAge, rl, rerr)
		} else {
			cost := rng.Int64N(l.maxCost + 1)
			if rng.IntN(10) == 0 {
				cost = rng.Int64N(r.Limit + 1)
			}
			md, merr := mem.Check(ctx, r, key, cost)
			rd, rerr := red.Check(ctx, r, key, cost)
			memOut, redOut = fmt.Sprintf("cost %d: %+v %v", cost, md, merr), fmt.Sprintf("cost %d: %+v %v", cost, rd, rerr)
			if !rd.Allowed {
				refused++
			}
		}
		if memOut != redOut {
			t.Fatalf("step %d at %v on %s|%s differs (seed %d):\nmemory %s\nredis  %s",
				step, clk.Now().Format(time.StampMicro), r.Name, key, seed, memOut, redOut)
		}
	}
	t.Logf("%d refusals", refused)
	if refused < 100 {
		t.Fatalf("only %d refusals: the logs are seldom full, and retries go untested", refused)
	}
}

// BenchmarkRedisCheckSlidingLog: what one admitted Check costs on a
// sliding log at the largest limit, by cost, each on a fresh key; and a
// refusal of the largest cost on a log full of single tokens, which must
// find when enough of them leave. redis-B/key is the key's MEMORY USAGE
// after one admitted call.
func BenchmarkRedisCheckSlidingLog(b *testing.B) {
	url := redistest.URL(b)
	s := dialRedis(b, url, store.RedisOptions{Timeout: 5 * time.Second})
	benchCheckSlidingLog(b, s, rawClient(b, url))
}

func BenchmarkMemoryCheckSlidingLog(b *testing.B) { benchCheckSlidingLog(b, benchMemory(b), nil) }

// benchCheckSlidingLog reports Redis memory when rdb is not nil.
func benchCheckSlidingLog(b *testing.B, s store.Store, rdb *redis.Client) {
	ctx := context.Background()
	// A period of a second: the fresh keys leave the store soon after the run.
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
			if rdb == nil {
				return
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
		if rdb != nil {
			b.StopTimer()
			if err := rdb.Del(ctx, logKey(b, rdb, full, "k")).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
