package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// TestRedisMatchesMemorySlots runs one random sequence of slot requests,
// releases and clock steps on concurrency rules against the memory store
// and a real Redis, both on one fake clock, and compares every answer: it
// keeps lua/concurrency.lua in step with core_concurrency.go, leases that
// end included.
func TestRedisMatchesMemorySlots(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ALLOT_PARITY_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with ALLOT_PARITY_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	red := fakeClockRedis(t, redistest.URL(t), clk)
	rs := []*rules.Rule{
		newRule(t, rules.Rule{Name: "cc-small", Algorithm: rules.Concurrency, Limit: 5, Lease: rules.LeaseTuning{TTL: 10 * time.Second}}),
		newRule(t, rules.Rule{Name: "cc-wide", Algorithm: rules.Concurrency, Limit: 20, Lease: rules.LeaseTuning{TTL: 10 * time.Second, Max: 12}}),
	}
	ctx := context.Background()
	for step := range 800 {
		r := rs[rng.IntN(len(rs))]
		key, node := "k"+strconv.Itoa(rng.IntN(2)), "n"+strconv.Itoa(rng.IntN(5))
		var memOut, redOut string
		switch n := rng.IntN(10); {
		case n == 0:
			clk.Advance(time.Duration(rng.Int64N(4000)) * time.Millisecond)
			continue
		case n == 1:
			ret := []store.Return{{Rule: r, Key: key, Node: node}}
			if err := mem.Release(ctx, ret); err != nil {
				t.Fatal(err)
			}
			if err := red.Release(ctx, ret); err != nil {
				t.Fatal(err)
			}
			continue
		default:
			var reqs []store.AcquireRequest
			for range 1 + rng.IntN(3) { // one node's batch, over keys
				reqs = append(reqs, store.AcquireRequest{Rule: r, Key: "k" + strconv.Itoa(len(reqs)), Node: node,
					Want: rng.Int64N(r.Limit + 3), SlotsKept: rng.Int64N(7) - 1,
					Seq: rng.Int64N(6)}) // 0: none; else at, below or above the holder's last
			}
			memOut, redOut = runSlots(t, mem, reqs), runSlots(t, red, reqs)
		}
		if memOut != redOut {
			t.Fatalf("step %d differs (seed %d):\nmemory %s\nredis  %s", step, seed, memOut, redOut)
		}
	}
}

func runSlots(t *testing.T, s store.Store, reqs []store.AcquireRequest) string {
	t.Helper()
	ls, err := s.Acquire(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for i, l := range ls {
		out += fmt.Sprintf("[%s %s want %d kept %d seq %d: granted %d remaining %d holders %d share %d ttl %v] ",
			reqs[i].Key, reqs[i].Node, reqs[i].Want, reqs[i].SlotsKept, reqs[i].Seq, l.Granted, l.Remaining, l.Holders, l.SlotShare, l.TTL)
	}
	return out
}
