package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
	"github.com/allot-dev/allot/internal/store/storetest"
)

func dialRedis(t testing.TB, url string, opts store.RedisOptions) *store.Redis {
	t.Helper()
	s, err := store.DialRedis(url, opts)
	if err != nil {
		t.Fatalf("DialRedis(%s): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newRule normalizes r under a name no other test (or test binary sharing
// the server) uses.
var ruleSeq atomic.Int64

func newRule(t testing.TB, r rules.Rule) *rules.Rule {
	t.Helper()
	r.Name = fmt.Sprintf("rt%d-%d-%s", time.Now().UnixNano()%1e9, ruleSeq.Add(1), r.Name)
	if err := r.Normalize(); err != nil {
		t.Fatalf("rule: %v", err)
	}
	return &r
}

// A year-long period and an hour-long lease keep the real clock out of the
// numbers for the length of a test: refill is negligible, no window rolls,
// no holder expires.
const (
	year = rules.MaxPeriod
	hour = time.Hour
)

func slowRule(t testing.TB, alg rules.Algorithm, limit int64) *rules.Rule {
	return newRule(t, rules.Rule{Name: alg.String(), Algorithm: alg, Limit: limit, Period: year,
		Lease: rules.LeaseTuning{TTL: hour}})
}

// conformanceTimeout replaces the 50ms default in the suites: they check
// semantics, and their 1,000 simultaneous calls queue for far longer than
// 50ms on a small, busy CI machine (~100-300ms here), which would turn into
// ErrUnavailable. The time bounds are TestRedisRestart's and TestRedisHung's.
const conformanceTimeout = 5 * time.Second

func TestRedisConformance(t *testing.T) {
	url := redistest.URL(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return dialRedis(t, url, store.RedisOptions{Timeout: conformanceTimeout})
		},
		Advance: func(t *testing.T, d time.Duration) { time.Sleep(d) },
	})
}

// parityOp is one random operation run against both stores.
type parityOp struct {
	kind string // acquire, release or check
	reqs []store.AcquireRequest
	rets []store.Return
	rule *rules.Rule
	key  string
	cost int64
}

// TestRedisMatchesMemory runs one random sequence of operations against the
// memory store on a fake clock and against Redis, and compares every number
// that does not depend on the clock: it catches any line of the Lua port
// that strays from core.go.
func TestRedisMatchesMemory(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ALLOT_PARITY_SEED"); s != "" { // replay a failing run
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with ALLOT_PARITY_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	mem := store.NewMemory(clock.NewFake(time.Now()))
	t.Cleanup(func() { mem.Close() })
	red := dialRedis(t, redistest.URL(t), store.RedisOptions{Timeout: time.Second})
	leasable := []*rules.Rule{
		slowRule(t, rules.TokenBucket, 50),
		newRule(t, rules.Rule{Name: "tb-burst", Algorithm: rules.TokenBucket, Limit: 7, Burst: 30, Period: year,
			Lease: rules.LeaseTuning{TTL: hour}}),
		slowRule(t, rules.FixedWindow, 40),
		slowRule(t, rules.SlidingWindow, 40),
		newRule(t, rules.Rule{Name: "fw-debt", Algorithm: rules.FixedWindow, Limit: 30, Period: year,
			Lease: rules.LeaseTuning{TTL: hour}, MaxDebt: rules.MaxDebtOf(12)}),
	}
	all := append(leasable, newRule(t, rules.Rule{Name: "sl-debt", Algorithm: rules.SlidingLog, Limit: 20, Period: year,
		Lease: rules.LeaseTuning{TTL: hour}, MaxDebt: rules.MaxDebtOf(7)}))
	// Epochs differ between the clocks: each store gets back its own.
	epochs := [2]map[string]int64{{}, {}}
	for step := range 600 {
		op := randomOp(rng, leasable, all)
		memOut, err := runOp(mem, op, epochs[0])
		if err != nil {
			t.Fatalf("step %d memory %s: %v", step, op.kind, err)
		}
		redOut, err := runOp(red, op, epochs[1])
		if err != nil {
			t.Fatalf("step %d redis %s: %v", step, op.kind, err)
		}
		if memOut != redOut {
			t.Fatalf("step %d %s differs (seed %d):\nmemory %s\nredis  %s", step, op.kind, seed, memOut, redOut)
		}
	}
}

func randomOp(rng *rand.Rand, leasable, all []*rules.Rule) parityOp {
	key := func() string { return "k" + strconv.Itoa(rng.IntN(3)) }
	node := func() string { return "n" + strconv.Itoa(rng.IntN(3)) }
	switch rng.IntN(3) {
	case 0:
		op := parityOp{kind: "acquire"}
		for range 1 + rng.IntN(4) {
			req := store.AcquireRequest{Rule: leasable[rng.IntN(len(leasable))], Key: key(), Node: node(), Want: rng.Int64N(26)}
			if rng.IntN(5) == 0 {
				req.Consumed = rng.Int64N(16)
				req.ConsumedAge = time.Duration(rng.Int64N(3000)) * time.Millisecond
			}
			if rng.IntN(2) == 0 { // a rate share, up to 3/4 of the rule's rate
				req.WantRate = req.Rule.Rate() * 0.75 * rng.Float64()
			}
			if rng.IntN(5) == 0 {
				req.Returned = rng.Int64N(11)
			}
			req.Held, req.HeldKnown = randomHeld(rng)
			if req.HeldKnown && rng.IntN(2) == 0 { // how long it has held no more
				req.HeldFor, req.HeldForKnown = time.Duration(rng.Int64N(3000))*time.Millisecond, true
			}
			req.OnFallback = rng.IntN(4) == 0
			if rng.IntN(4) == 0 { // a settled cost, at times past the rule's debt
				req.Settled = rng.Int64N(2 * (req.Rule.Capacity() + req.Rule.Debt() + 1))
			}
			req.Seq = rng.Int64N(3) // 0: none; else it may repeat the node's last: a replay
			if rng.IntN(6) == 0 {   // a strict rule: a report of consumption only
				strict := all[len(all)-1]
				req = store.AcquireRequest{Rule: strict, Key: key(), Node: node(), Consumed: rng.Int64N(8),
					ConsumedAge: time.Duration(rng.Int64N(3)) * time.Second}
				if rng.IntN(3) == 0 {
					req.Settled = rng.Int64N(30)
				}
			}
			op.reqs = append(op.reqs, req)
		}
		return op
	case 1:
		op := parityOp{kind: "release"}
		for range 1 + rng.IntN(3) {
			ret := store.Return{Rule: leasable[rng.IntN(len(leasable))], Key: key(), Node: node(), Tokens: rng.Int64N(21)}
			ret.Held, ret.HeldKnown = randomHeld(rng)
			op.rets = append(op.rets, ret)
		}
		return op
	default:
		r := all[rng.IntN(len(all))]
		return parityOp{kind: "check", rule: r, key: key(), cost: rng.Int64N(r.Capacity() + 1)}
	}
}

// randomHeld is what a node says it holds: mostly something, at times
// nothing said (an older node).
func randomHeld(rng *rand.Rand) (int64, bool) {
	if rng.IntN(4) == 0 {
		return 0, false
	}
	return rng.Int64N(31), true
}

// runOp runs op on s and renders what must match between the stores.
func runOp(s store.Store, op parityOp, epochs map[string]int64) (string, error) {
	ctx := context.Background()
	var b strings.Builder
	switch op.kind {
	case "acquire":
		reqs := append([]store.AcquireRequest(nil), op.reqs...)
		for i := range reqs {
			reqs[i].ReturnedEpoch = epochs[reqs[i].Rule.Name+"|"+reqs[i].Key]
		}
		ls, err := s.Acquire(ctx, reqs)
		if err != nil {
			return "", err
		}
		for i, l := range ls {
			req := op.reqs[i]
			epochs[req.Rule.Name+"|"+req.Key] = l.Epoch
			// The rate is printed to 9 digits: a bucket in debt by less
			// than the refill the clocks' difference earns may differ
			// further down.
			fmt.Fprintf(&b, "[%s %s %s want %d rate %.9g consumed %d settled %d returned %d held %d/%t for %v/%t: granted %d remaining %d holders %d ttl %v retry %t rate %.9g] ",
				req.Rule.Algorithm, req.Key, req.Node, req.Want, req.WantRate, req.Consumed, req.Settled, req.Returned, req.Held, req.HeldKnown,
				req.HeldFor, req.HeldForKnown, l.Granted, l.Remaining, l.Holders, l.TTL, l.RetryAfter > 0, l.Rate)
		}
	case "release":
		rets := append([]store.Return(nil), op.rets...)
		for i := range rets {
			rets[i].Epoch = epochs[rets[i].Rule.Name+"|"+rets[i].Key]
		}
		if err := s.Release(ctx, rets); err != nil {
			return "", err
		}
	default:
		d, err := s.Check(ctx, op.rule, op.key, op.cost)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %s cost %d: allowed %t limit %d remaining %d retry %t reset %t",
			op.rule.Algorithm, op.key, op.cost, d.Allowed, d.Limit, d.Remaining, d.RetryAfter > 0, d.ResetAfter > 0)
	}
	return b.String(), nil
}

// TestRedisSlidingWindowWeighsPrevious: in the window after a full one, the
// previous count weighs in by the share of it the sliding window still
// covers. The parity test cannot see this (its windows never roll), so the
// expected numbers come from Redis TIME read around the call.
func TestRedisSlidingWindowWeighsPrevious(t *testing.T) {
	srv := redistest.Start(t)
	s := dialRedis(t, srv.URL(), store.RedisOptions{Timeout: time.Second})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	const period = 400 * time.Millisecond
	p := period.Microseconds()
	redisNow := func() int64 {
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMicro()
	}
	// remainingAt is core.go's checkWindow for cost 0 after a full window.
	remainingAt := func(now int64) int64 {
		weight := float64(p-(now-now/p*p)) / float64(p)
		return int64(math.Floor(math.Max(10-10*weight, 0)))
	}
	sleepPast := func(offset time.Duration) {
		now := redisNow()
		time.Sleep(time.Duration((now/p+1)*p-now)*time.Microsecond + offset)
	}
	for attempt := 0; ; attempt++ {
		r := newRule(t, rules.Rule{Name: "sw", Algorithm: rules.SlidingWindow, Limit: 10, Period: period})
		sleepPast(10 * time.Millisecond)
		f0 := redisNow()
		full, err := s.Check(ctx, r, "k", 10)
		f1 := redisNow()
		sleepPast(100 * time.Millisecond)
		t0 := redisNow()
		d, err2 := s.Check(ctx, r, "k", 0)
		t1 := redisNow()
		if err != nil || err2 != nil || !full.Allowed {
			t.Fatalf("fill %+v, %v; check %v", full, err, err2)
		}
		if f0/p != f1/p || t0/p != f1/p+1 || t1/p != t0/p {
			if attempt < 3 { // the machine stalled across a boundary
				continue
			}
			t.Fatal("could not fit the calls in consecutive windows")
		}
		lo, hi := remainingAt(t0), remainingAt(t1)
		if !d.Allowed || d.Remaining < lo || d.Remaining > hi || d.ResetAfter <= 0 {
			t.Fatalf("next window: %+v, want allowed with remaining in [%d, %d]", d, lo, hi)
		}
		return
	}
}

// exerciseAll runs every operation of every algorithm on a few keys,
// including states that expire and are reused within the test.
func exerciseAll(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	fast := func(alg rules.Algorithm) *rules.Rule {
		return newRule(t, rules.Rule{Name: "fast", Algorithm: alg, Limit: 5, Period: 20 * time.Millisecond,
			Lease: rules.LeaseTuning{TTL: 5 * time.Millisecond}})
	}
	var leasable, all []*rules.Rule
	for _, alg := range []rules.Algorithm{rules.TokenBucket, rules.FixedWindow, rules.SlidingWindow} {
		leasable = append(leasable, slowRule(t, alg, 10), fast(alg))
	}
	all = append(leasable, slowRule(t, rules.SlidingLog, 10), fast(rules.SlidingLog))
	for round := range 3 {
		for _, r := range leasable {
			for k := range 3 {
				key := fmt.Sprintf("k%d", k)
				ls, err := s.Acquire(ctx, []store.AcquireRequest{{Rule: r, Key: key, Node: "n", Want: 3, Consumed: 1}})
				if err != nil {
					t.Fatal(err)
				}
				rets := []store.Return{{Rule: r, Key: key, Node: "n", Tokens: 1, Epoch: ls[0].Epoch},
					{Rule: r, Key: "never-acquired", Node: "n", Tokens: 1}}
				if err := s.Release(ctx, rets); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, r := range all {
			for k := range 3 {
				if _, err := s.Check(ctx, r, fmt.Sprintf("k%d", k), 2); err != nil {
					t.Fatal(err)
				}
			}
		}
		if round < 2 {
			time.Sleep(30 * time.Millisecond) // the fast rules' states expire
		}
	}
}

// TestRedisEveryKeyHasTTL: no operation of any algorithm leaves a key that
// Redis would keep forever.
func TestRedisEveryKeyHasTTL(t *testing.T) {
	srv := redistest.Start(t)
	exerciseAll(t, dialRedis(t, srv.URL(), store.RedisOptions{Timeout: time.Second}))
	// Past the fast rules' lifetime (45ms at most), a fast key still there
	// would be one without a TTL: SCAN skips the expired ones.
	time.Sleep(60 * time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	tags := map[string]int{}
	iter := rdb.Scan(ctx, 0, "allot:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ttl == -2: // (-2ns) expired between the SCAN and the PTTL
			continue
		case ttl < 0: // -1ns: no TTL (0: one expiring within the millisecond)
			t.Errorf("key %q has PTTL %v, want a TTL", k, ttl)
		}
		tag, _, _ := strings.Cut(strings.SplitN(k, ":", 3)[1], "@") // a window's period follows its algorithm
		tags[tag]++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"tb3", "fw3", "sw3", "sl2"} {
		if tags[tag] == 0 {
			t.Errorf("no %s key found; keys by algorithm: %v", tag, tags)
		}
	}
	t.Logf("keys by algorithm: %v", tags)
}

func commandStats(t *testing.T, rdb *redis.Client) map[string]map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]map[string]int64{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		m := map[string]int64{}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			m[k] = int64(n)
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = m
	}
	return stats
}

// timed runs f and fails unless it returns ErrUnavailable within bound.
func timed(t *testing.T, what string, bound time.Duration, f func() error) {
	t.Helper()
	start := time.Now()
	err := f()
	took := time.Since(start)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("%s: %v, want ErrUnavailable", what, err)
	}
	if took >= bound {
		t.Errorf("%s took %v, want under %v", what, took, bound)
	}
	t.Logf("%s: %v after %v", what, err, took)
}

// TestRedisRestart: a dead Redis fails fast; a restarted one (empty, its
// script cache lost) serves again with no help, through the NOSCRIPT path.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	s := dialRedis(t, srv.URL(), store.RedisOptions{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	tb, fw, sw := slowRule(t, rules.TokenBucket, 10), slowRule(t, rules.FixedWindow, 10), slowRule(t, rules.SlidingWindow, 10)
	log := slowRule(t, rules.SlidingLog, 10)
	reqs := []store.AcquireRequest{{Rule: tb, Key: "k", Node: "n", Want: 4}, {Rule: fw, Key: "k", Node: "n", Want: 4},
		{Rule: sw, Key: "k", Node: "n", Want: 4}}
	if _, err := s.Acquire(ctx, reqs); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	for range 3 {
		timed(t, "Acquire on a dead Redis", 100*time.Millisecond, func() error { _, err := s.Acquire(ctx, reqs); return err })
		timed(t, "Check on a dead Redis", 100*time.Millisecond, func() error { _, err := s.Check(ctx, log, "k", 1); return err })
	}

	srv.Restart(t)
	var ls []store.Lease
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ls, err = s.Acquire(ctx, reqs); err == nil {
			break
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("no recovery after the restart: %v", err)
		}
	}
	for i, l := range ls {
		if l.Granted != 4 || l.Remaining != 6 {
			t.Errorf("%s after the restart: %+v, want a fresh state (granted 4, remaining 6)", reqs[i].Rule.Algorithm, l)
		}
	}
	if d, err := s.Check(ctx, log, "k", 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("sliding log after the restart: %+v, %v", d, err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	before := commandStats(t, rdb)
	// Each of the 4 scripts met NOSCRIPT at least once and was sent by EVAL.
	if before["eval"]["calls"] < 4 || before["evalsha"]["failed_calls"]+before["evalsha"]["rejected_calls"] < 4 {
		t.Errorf("after the restart, want EVALSHA answered NOSCRIPT and EVAL once per script: evalsha %v, eval %v", before["evalsha"], before["eval"])
	}
	if _, err := s.Acquire(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	after := commandStats(t, rdb)
	if got := after["evalsha"]["calls"] - before["evalsha"]["calls"]; got != 3 || after["eval"]["calls"] != before["eval"]["calls"] {
		t.Errorf("the scripts are cached again: want 3 more EVALSHA and no EVAL, got %d EVALSHA, eval %v", got, after["eval"])
	}
}

// TestRedisHung: a Redis that accepts connections but answers nothing
// (SIGSTOP) costs the store timeout, not a hang.
func TestRedisHung(t *testing.T) {
	srv := redistest.Start(t)
	s := dialRedis(t, srv.URL(), store.RedisOptions{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	r := slowRule(t, rules.TokenBucket, 10)
	reqs := []store.AcquireRequest{{Rule: r, Key: "k", Node: "n", Want: 1}}
	if _, err := s.Acquire(ctx, reqs); err != nil {
		t.Fatal(err)
	}

	srv.Pause(t)
	for range 3 {
		timed(t, "Acquire on a hung Redis", 200*time.Millisecond, func() error { _, err := s.Acquire(ctx, reqs); return err })
		timed(t, "Check on a hung Redis", 200*time.Millisecond, func() error { _, err := s.Check(ctx, r, "k", 1); return err })
	}

	srv.Resume()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := s.Acquire(ctx, reqs)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after SIGCONT: %v", err)
		}
	}
}

// TestRedisCanceledContext: the caller's cancellation is reported as such,
// not as an outage.
func TestRedisCanceledContext(t *testing.T) {
	s := dialRedis(t, redistest.URL(t), store.RedisOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := slowRule(t, rules.TokenBucket, 10)
	if _, err := s.Acquire(ctx, []store.AcquireRequest{{Rule: r, Key: "k", Node: "n", Want: 1}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire: %v, want context.Canceled", err)
	}
	if err := s.Release(ctx, []store.Return{{Rule: r, Key: "k", Node: "n", Tokens: 1}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Release: %v, want context.Canceled", err)
	}
}

// pipelineCounter is a go-redis hook that counts the script calls sent
// alone and the pipelines that carry script calls.
type pipelineCounter struct {
	pipelines, pipelined, single atomic.Int64
}

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if isScript(c) {
				n++
			}
		}
		if n > 0 {
			h.pipelines.Add(1)
			h.pipelined.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

// TestRedisBatchIsOneRoundTrip: 50 keys cost 50 EVALSHA in one pipeline.
func TestRedisBatchIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	s, err := store.NewRedis(client, store.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hook := &pipelineCounter{}
	client.AddHook(hook)
	r := slowRule(t, rules.TokenBucket, 100)
	reqs := make([]store.AcquireRequest, 50)
	for i := range reqs {
		reqs[i] = store.AcquireRequest{Rule: r, Key: fmt.Sprintf("key-%d", i), Node: "n", Want: 5}
	}
	before := commandStats(t, client)
	ls, err := s.Acquire(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	after := commandStats(t, client)
	for i, l := range ls {
		if l.Granted != 5 {
			t.Fatalf("lease %d: %+v", i, l)
		}
	}
	// One algorithm's keys are one script call on a single Redis: one
	// command, one TIME, one round trip.
	if got := after["evalsha"]["calls"] - before["evalsha"]["calls"]; got != 1 {
		t.Errorf("cmdstat_evalsha calls grew by %d, want 1 for the 50 keys", got)
	}
	if got := after["time"]["calls"] - before["time"]["calls"]; got != 1 {
		t.Errorf("TIME ran %d times, want once for the batch", got)
	}
	if after["eval"]["calls"] != before["eval"]["calls"] {
		t.Errorf("EVAL was called: the scripts loaded at NewRedis should serve")
	}
	if p, n, single := hook.pipelines.Load(), hook.pipelined.Load(), hook.single.Load(); p != 1 || n != 1 || single != 0 {
		t.Errorf("%d pipelines carrying %d script calls, %d sent alone; want 1 pipeline of 1", p, n, single)
	}
	// Two algorithms: a call each, in one pipeline.
	w := slowRule(t, rules.FixedWindow, 100)
	mixed := append(reqs[:3:3], store.AcquireRequest{Rule: w, Key: "w", Node: "n", Want: 5})
	hook.pipelines.Store(0)
	hook.pipelined.Store(0)
	if _, err := s.Acquire(context.Background(), mixed); err != nil {
		t.Fatal(err)
	}
	if p, n := hook.pipelines.Load(), hook.pipelined.Load(); p != 1 || n != 2 {
		t.Errorf("token bucket and fixed window keys: %d pipelines carrying %d script calls, want 1 of 2", p, n)
	}
}

// TestRedisKeyLayout: one key per (rule, algorithm, key) under the prefix,
// hash-tagged; a rule whose algorithm changes starts afresh instead of
// meeting a value of another type.
func TestRedisKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	s := dialRedis(t, srv.URL(), store.RedisOptions{KeyPrefix: "lim"})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	r := newRule(t, rules.Rule{Name: "api", Algorithm: rules.TokenBucket, Limit: 10, Period: year})
	if _, err := s.Acquire(ctx, []store.AcquireRequest{{Rule: r, Key: "user:{7}", Node: "n", Want: 1}}); err != nil {
		t.Fatal(err)
	}
	want := "lim:tb3:{" + r.Name + "|user:{7}}"
	if n, err := rdb.Exists(ctx, want).Result(); err != nil || n != 1 {
		t.Fatalf("key %q not found (%d, %v)", want, n, err)
	}
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow, rules.SlidingLog} {
		changed := *r
		changed.Algorithm, changed.Burst, changed.Strict = alg, 0, false
		if err := changed.Normalize(); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Check(ctx, &changed, "user:{7}", 1); err != nil || !d.Allowed || d.Remaining != 9 {
			t.Fatalf("%s under the same name: %+v, %v; want a fresh state", alg, d, err)
		}
	}
}

// TestRedisSlidingLogEntriesAreUnique: a log keeps one member per request,
// however many tokens it admits (here three requests fill the whole limit),
// so that none overwrites another, and together they hold every token.
// TestRedisSlidingLogEntryPerRequest has requests within one microsecond.
func TestRedisSlidingLogEntriesAreUnique(t *testing.T) {
	srv := redistest.Start(t)
	s := dialRedis(t, srv.URL(), store.RedisOptions{Timeout: time.Second})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	r := newRule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: rules.MaxSlidingLog, Period: hour})
	costs := []int64{3, rules.MaxSlidingLog - 5, 2}
	for _, cost := range costs {
		if d, err := s.Check(ctx, r, "k", cost); err != nil || !d.Allowed {
			t.Fatalf("cost %d: %+v, %v", cost, d, err)
		}
	}
	if members, tokens := logEntries(t, rdb, "allot:sl2:{"+r.Name+"|k}"); len(members) != len(costs) || tokens != rules.MaxSlidingLog {
		t.Fatalf("log holds %d entries of %d tokens, want %d of %d: %v", len(members), tokens, len(costs), rules.MaxSlidingLog, members)
	}
	if d, err := s.Check(ctx, r, "k", 1); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("full log: %+v, %v", d, err)
	}
}

func TestNewRedisRequiresContextTimeouts(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	defer client.Close()
	if _, err := store.NewRedis(client, store.RedisOptions{}); err == nil {
		t.Fatal("NewRedis accepted a client that ignores context deadlines")
	}
}

func TestRedisCloseLeavesBorrowedClient(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	s, err := store.NewRedis(client, store.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the caller's client was closed by the store: %v", err)
	}
}

// TestRedisStartsWhileRedisIsDown: an allocator can start before its Redis;
// the store answers ErrUnavailable, then serves once Redis is up.
func TestRedisStartsWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	s := dialRedis(t, srv.URL(), store.RedisOptions{})
	r := slowRule(t, rules.SlidingLog, 3)
	ctx := context.Background()
	if _, err := s.Check(ctx, r, "k", 1); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Check with Redis down: %v, want ErrUnavailable", err)
	}
	srv.Restart(t)
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := s.Check(ctx, r, "k", 1)
		if err == nil {
			if !d.Allowed || d.Remaining != 2 {
				t.Fatalf("first check: %+v", d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no service once Redis is up: %v", err)
		}
	}
}

func TestDialRedisRejectsBadInput(t *testing.T) {
	if _, err := store.DialRedis(redistest.URL(t), store.RedisOptions{KeyPrefix: "a{b}"}); err == nil {
		t.Error("DialRedis accepted a key prefix with braces, which would defeat the hash tags")
	}

	for _, u := range []string{"http://localhost:6379", "redis://h1:1?bogus=1"} {
		if _, err := store.DialRedis(u, store.RedisOptions{}); err == nil {
			t.Errorf("DialRedis(%q) succeeded", u)
		}
	}
	if _, err := store.DialRedis("redis://h1:1?addr=h2:2&bogus=1", store.RedisOptions{Cluster: true}); err == nil {
		t.Error("DialRedis of a bad cluster URL succeeded")
	}
}

// Benchmarks: a store call per op; batches also report ns per key, and on
// Redis the Redis time per key (redis-µs/key).

func benchRule(b *testing.B) *rules.Rule {
	return newRule(b, rules.Rule{Name: "bench", Algorithm: rules.TokenBucket, Limit: rules.MaxLimit, Period: time.Second})
}

func benchAcquire(b *testing.B, s store.Store, url string) {
	r := benchRule(b)
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			reqs := make([]store.AcquireRequest, n)
			for i := range reqs {
				reqs[i] = store.AcquireRequest{Rule: r, Key: fmt.Sprintf("key-%d", i), Node: "node-1", Want: 10}
			}
			ctx := context.Background()
			done := redisTime(b, url, n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Acquire(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
			done()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}

func benchCheck(b *testing.B, s store.Store, url string) {
	r := benchRule(b)
	ctx := context.Background()
	done := redisTime(b, url, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Check(ctx, r, "key", 1); err != nil {
			b.Fatal(err)
		}
	}
	done()
}

// redisTime starts counting the time Redis spends in the benchmark's script
// calls (INFO commandstats: EVALSHA's, which holds the commands the scripts
// run); done reports it per key of keys per call. Without url it does
// nothing. Redis times each command by the wall clock: on a busy machine
// the figure includes the time Redis waits for a core.
func redisTime(b *testing.B, url string, keys int) (done func()) {
	if url == "" {
		return func() {}
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { rdb.Close() })
	usec := func() (calls, usec float64) {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(info) {
			fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
			if !ok {
				continue
			}
			for f := range strings.SplitSeq(fields, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					calls = n
				case "usec":
					usec = n
				}
			}
		}
		return calls, usec
	}
	c0, u0 := usec()
	return func() {
		if c1, u1 := usec(); c1 > c0 {
			b.ReportMetric((u1-u0)/(c1-c0)/float64(keys), "redis-µs/key")
		}
	}
}

func benchRedis(b *testing.B) store.Store {
	return dialRedis(b, redistest.URL(b), store.RedisOptions{Timeout: time.Second})
}

func benchMemory(b *testing.B) store.Store {
	m := store.NewMemory(clock.Real())
	b.Cleanup(func() { m.Close() })
	return m
}

func BenchmarkRedisAcquire(b *testing.B)  { benchAcquire(b, benchRedis(b), redistest.URL(b)) }
func BenchmarkRedisCheck(b *testing.B)    { benchCheck(b, benchRedis(b), redistest.URL(b)) }
func BenchmarkMemoryAcquire(b *testing.B) { benchAcquire(b, benchMemory(b), "") }
func BenchmarkMemoryCheck(b *testing.B)   { benchCheck(b, benchMemory(b), "") }
