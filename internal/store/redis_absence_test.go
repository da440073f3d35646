package store_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// TestRedisMatchesMemoryWithAbsences is TestRedisMatchesMemoryAcrossClockSteps
// with short leases and a clock that runs minutes ahead: holders' leases end
// between their requests, they are absent, come back with consumption to
// cover, and are forgotten when their absence ends. It keeps the Lua port
// of core_absence.go in step with it.
//
// Redis expires keys on its real clock, from TTLs the scripts compute on the
// fake one: the fake clock moves at least as fast as the real one (each step
// adds the real time the last one took, and more), so a key Redis has
// dropped is one whose state had expired on the fake clock too.
func TestRedisMatchesMemoryWithAbsences(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	red := fakeClockRedis(t, redistest.URL(t), clk)
	short := func(alg rules.Algorithm, limit, burst int64) *rules.Rule {
		return newRule(t, rules.Rule{Name: "abs-" + alg.String(), Algorithm: alg, Limit: limit, Burst: burst, Period: time.Second,
			Lease: rules.LeaseTuning{TTL: 200 * time.Millisecond}})
	}
	leasable := []*rules.Rule{
		short(rules.TokenBucket, 50, 0),
		short(rules.TokenBucket, 7, 30),
		short(rules.FixedWindow, 40, 0),
		short(rules.SlidingWindow, 40, 0),
		short(rules.FixedWindow, 7, 0),
	}
	all := append(leasable, newRule(t, rules.Rule{Name: "abs-log", Algorithm: rules.SlidingLog, Limit: 20, Period: time.Hour}))
	epochs := [2]map[string]int64{{}, {}}
	last := time.Now()
	for step := range 500 {
		extra := 20*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
		if rng.IntN(40) == 0 { // past an absence now and then
			extra += time.Minute
		}
		clk.Advance(time.Since(last) + extra)
		last = time.Now()
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
