package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
	"github.com/allot-dev/allot/internal/store/storetest"
)

// redisTimeCall is how the scripts read the store's clock (common.lua).
const redisTimeCall = "redis.call('TIME')"

// fakeTime is a go-redis hook that puts a real Redis on a fake clock, for
// tests only: it rewrites every EVALSHA the store sends into an EVAL of the
// same script whose Redis TIME is replaced by the clock's instant. Redis
// TIME cannot be stepped, and the production scripts carry no clock hook,
// so this is the way to step the scripts' clock back across a window.
type fakeTime struct {
	clk *clock.Fake
	src map[string]string // by SHA-1

	mu    sync.Mutex
	cache map[int64]map[string]string // rewritten sources by instant, then SHA-1
}

func newFakeTime(t testing.TB, clk *clock.Fake) *fakeTime {
	t.Helper()
	src := store.ScriptSources()
	for sha, s := range src {
		if strings.Count(s, redisTimeCall) != 1 {
			t.Fatalf("script %s reads the clock %d times through %s, want once: fix fakeTime",
				sha, strings.Count(s, redisTimeCall), redisTimeCall)
		}
	}
	return &fakeTime{clk: clk, src: src, cache: make(map[int64]map[string]string)}
}

func (f *fakeTime) source(sha string, now int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := f.cache[now]
	if at == nil {
		clear(f.cache) // the clock moved: the old instants are not asked again
		at = make(map[string]string)
		f.cache[now] = at
	}
	s, ok := at[sha]
	if !ok {
		s = strings.Replace(f.src[sha], redisTimeCall, fmt.Sprintf("{ '%d', '%d' }", now/1e6, now%1e6), 1)
		at[sha] = s
	}
	return s
}

func (f *fakeTime) rewrite(cmd redis.Cmder) {
	args := cmd.Args()
	if cmd.Name() != "evalsha" || len(args) < 2 {
		return
	}
	sha, _ := args[1].(string)
	if _, ok := f.src[sha]; !ok {
		return
	}
	args[0], args[1] = "eval", f.source(sha, f.clk.Now().UnixMicro())
}

func (f *fakeTime) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *fakeTime) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.rewrite(cmd)
		return next(ctx, cmd)
	}
}

func (f *fakeTime) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			f.rewrite(c)
		}
		return next(ctx, cmds)
	}
}

// fakeClockRedis returns a Redis store whose scripts read clk.
func fakeClockRedis(t *testing.T, url string, clk *clock.Fake) store.Store {
	t.Helper()
	return fakeClockRedisWith(t, url, clk, clk)
}

// fakeClockRedisWith is fakeClockRedis whose allocator reads a clock of its
// own: the one calendar windows are computed around.
func fakeClockRedisWith(t *testing.T, url string, clk *clock.Fake, alloc clock.Clock) store.Store {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.ContextTimeoutEnabled = true
	client := redis.NewClient(opts)
	client.AddHook(newFakeTime(t, clk))
	s, err := store.NewRedis(client, store.RedisOptions{Timeout: conformanceTimeout, Clock: alloc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		client.Close()
	})
	return s
}

// TestRedisConformanceOnFakeClock runs the suite against Redis with the
// scripts' clock under the test's control, which the real-clock run cannot
// give: windows roll at exact instants and the clock steps back.
func TestRedisConformanceOnFakeClock(t *testing.T) {
	url := redistest.URL(t)
	var clk *clock.Fake
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			clk = clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			return fakeClockRedis(t, url, clk)
		},
		Advance:   func(t *testing.T, d time.Duration) { clk.Advance(d) },
		StepBack:  func(t *testing.T, d time.Duration) { clk.Advance(-d) },
		FakeClock: true,
		Now:       func() time.Time { return clk.Now() },
	})
}

// TestRedisMatchesMemoryAcrossClockSteps is TestRedisMatchesMemory with both
// stores on one fake clock that moves forward and, now and then, back across
// a window boundary; windows roll, so every number must match, the clock's
// included. It keeps the Lua port of roll in step with core.go.
func TestRedisMatchesMemoryAcrossClockSteps(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	red := fakeClockRedis(t, redistest.URL(t), clk)
	// Lease TTLs of an hour: Redis expires keys on its real clock, and a
	// state must outlive the test there whatever the fake clock reads.
	short := func(alg rules.Algorithm, limit int64) *rules.Rule {
		return newRule(t, rules.Rule{Name: "step-" + alg.String(), Algorithm: alg, Limit: limit, Period: time.Second,
			Lease: rules.LeaseTuning{TTL: hour}})
	}
	leasable := []*rules.Rule{
		short(rules.TokenBucket, 50),
		short(rules.FixedWindow, 40),
		short(rules.SlidingWindow, 40),
		short(rules.FixedWindow, 7),
		short(rules.SlidingWindow, 7),
	}
	all := append(leasable, newRule(t, rules.Rule{Name: "step-log", Algorithm: rules.SlidingLog, Limit: 20, Period: time.Hour}))
	epochs := [2]map[string]int64{{}, {}}
	for step := range 400 {
		switch n := rng.IntN(10); {
		case n < 3:
			clk.Advance(time.Duration(rng.Int64N(int64(600 * time.Millisecond))))
		case n == 3:
			clk.Advance(-time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
		op := randomOp(rng, leasable, all)
		memOut, err := runExactOp(mem, op, epochs[0])
		if err != nil {
			t.Fatalf("step %d memory %s: %v", step, op.kind, err)
		}
		redOut, err := runExactOp(red, op, epochs[1])
		if err != nil {
			t.Fatalf("step %d redis %s: %v", step, op.kind, err)
		}
		if memOut != redOut {
			t.Fatalf("step %d at %v %s differs (seed %d):\nmemory %s\nredis  %s",
				step, clk.Now().Format(time.StampMicro), op.kind, seed, memOut, redOut)
		}
	}
}

// runExactOp runs op on s and renders every number of the answer.
func runExactOp(s store.Store, op parityOp, epochs map[string]int64) (string, error) {
	ctx := context.Background()
	switch op.kind {
	case "acquire":
		ls, err := s.Acquire(ctx, op.reqs)
		for i, l := range ls {
			req := op.reqs[i]
			epochs[req.Rule.Name+"|"+req.Key] = l.Epoch
		}
		return fmt.Sprintf("%+v", ls), err
	case "release":
		rets := append([]store.Return(nil), op.rets...)
		for i := range rets {
			rets[i].Epoch = epochs[rets[i].Rule.Name+"|"+rets[i].Key]
		}
		return "", s.Release(ctx, rets)
	default:
		d, err := s.Check(ctx, op.rule, op.key, op.cost)
		return fmt.Sprintf("%+v", d), err
	}
}
