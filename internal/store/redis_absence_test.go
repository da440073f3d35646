package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// TestRedisMatchesMemoryWithAbsences is TestRedisMatchesMemoryAcrossClockSteps
// with short leases and a clock that runs minutes ahead: holders' leases end
// between their requests, they are absent, come back with consumption to
// cover, and are forgotten when their absence ends. Most returns, and a
// quarter of the other leases, are followed at once (a few to 150 ms later,
// or past the lease now and then) by their nodes' next requests, reporting
// what they admitted meanwhile, as a node back from its fallback does when
// its return's answer arrives: so holders back from an absence meet their
// next requests, present or absent again, and the others' requests in
// between. It keeps the Lua port of core_absence.go in
// step with it; the counts of what it met are logged, and too few fail it.
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
	seen := newReturns()
	var follow []store.AcquireRequest // the lease whose nodes ask next
	last := time.Now()
	for step := range 800 {
		extra := 20*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
		switch {
		case follow != nil && rng.IntN(4) == 0: // past the lease: absent again
			extra = 200*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
		case follow != nil:
			extra = time.Millisecond + time.Duration(rng.Int64N(int64(150*time.Millisecond)))
		case rng.IntN(40) == 0: // past an absence now and then
			extra += time.Minute
		}
		clk.Advance(time.Since(last) + extra)
		last = time.Now()
		op := randomOp(rng, leasable, all)
		if follow != nil {
			op, follow = nextRequests(rng, follow), nil
		}
		if op.kind == "acquire" {
			moreConsumed(rng, op.reqs)
		}
		if back := seen.apply(op, clk.Now().UnixMicro()); op.kind == "acquire" && rng.IntN(4) < 1+2*back {
			follow = op.reqs // most returns, a quarter of the rest
		}
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
	t.Logf("met %d returns from a reserved absence (%d of token buckets), %d next requests after one (%d with the holder present, %d absent again), %d replays",
		seen.returns, seen.bucketReturns, seen.nextPresent+seen.nextAbsent, seen.nextPresent, seen.nextAbsent, seen.replays)
	if seen.bucketReturns < 15 || seen.returns-seen.bucketReturns < 15 || seen.nextPresent < 20 || seen.nextAbsent < 8 {
		t.Errorf("too few returns and next requests met to compare the ports (seed %d)", seed)
	}
}

// moreConsumed makes half the leases of reqs report consumption, as a
// holder back from its fallback does: a return marks a holder back only
// when it reports some (core_absence.go).
func moreConsumed(rng *rand.Rand, reqs []store.AcquireRequest) {
	for i := range reqs {
		if reqs[i].Rule.Leasable() && reqs[i].Consumed == 0 && rng.IntN(2) == 0 {
			reqs[i].Consumed = 1 + rng.Int64N(15)
			reqs[i].ConsumedAge = time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		}
	}
}

// nextRequests is the next request of each node of reqs on the same key:
// what it admitted since, mostly, and another want.
func nextRequests(rng *rand.Rand, reqs []store.AcquireRequest) parityOp {
	op := parityOp{kind: "acquire"}
	for _, prev := range reqs {
		req := store.AcquireRequest{Rule: prev.Rule, Key: prev.Key, Node: prev.Node, Want: rng.Int64N(26)}
		if req.Rule.Leasable() {
			if rng.IntN(4) != 0 {
				req.Consumed = 1 + rng.Int64N(15)
				req.ConsumedAge = time.Duration(rng.Int64N(int64(200 * time.Millisecond)))
			}
			if rng.IntN(2) == 0 {
				req.WantRate = req.Rule.Rate() * 0.75 * rng.Float64()
			}
			req.Held, req.HeldKnown = randomHeld(rng)
			req.Seq = prev.Seq%2 + 1 // the next request
			if rng.IntN(6) == 0 {
				req.Seq = prev.Seq // a retry: answered again while the lease lasts
			}
		} else {
			req.Want, req.Consumed, req.ConsumedAge = 0, rng.Int64N(8), prev.ConsumedAge
		}
		op.reqs = append(op.reqs, req)
	}
	return op
}

// returns follows the holders as core.go keeps them, to count the requests
// of holders back from an absence (core_absence.go's markBack) and their
// next requests.
type returns struct {
	holders                                         map[string]returnHolder
	returns, bucketReturns, nextPresent, nextAbsent int
	replays                                         int
}

type returnHolder struct {
	until, seq int64
	back       bool
}

func newReturns() *returns { return &returns{holders: make(map[string]returnHolder)} }

// apply follows op at now, and returns 1 when one of its requests is a
// return, else 0.
func (m *returns) apply(op parityOp, now int64) int {
	back := 0
	switch op.kind {
	case "acquire":
		for _, req := range op.reqs {
			if m.acquire(req, now) {
				back = 1
			}
		}
	case "release":
		for _, ret := range op.rets {
			delete(m.holders, ret.Rule.Name+"|"+ret.Key+"|"+ret.Node)
		}
	}
	return back
}

func (m *returns) acquire(req store.AcquireRequest, now int64) bool {
	r := req.Rule
	if !r.Leasable() {
		return false
	}
	k := r.Name + "|" + req.Key + "|" + req.Node
	ttl, a, p := r.Lease.TTL.Microseconds(), r.Lease.Absence().Microseconds(), r.Period.Microseconds()
	h, ok := m.holders[k]
	if ok && h.until+a <= now {
		ok = false
	}
	if ok && req.Seq > 0 && h.seq == req.Seq && h.until > now {
		m.replays++
		return false
	}
	if ok && h.back {
		if h.until > now {
			m.nextPresent++
		} else {
			m.nextAbsent++
		}
	}
	back := false
	if ok && h.until <= now && req.Consumed > 0 {
		prevEpoch, epoch := (h.until-ttl)/p, now/p
		back = r.Algorithm == rules.TokenBucket || min(h.until, (prevEpoch+1)*p) <= epoch*p || h.back && prevEpoch == epoch
	}
	if back {
		m.returns++
		if r.Algorithm == rules.TokenBucket {
			m.bucketReturns++
		}
	}
	m.holders[k] = returnHolder{until: now + ttl, seq: req.Seq, back: back}
	return back
}

// readAsBefore reads a state as the scripts before back records did
// (common.lua's load until then: four values, then ten a holder) and
// answers each record's node, its until, and 1 when its nine values are
// numbers but for a lent rate left out (nil), as that version's decisions
// need them to be.
const readAsBefore = `local v = redis.call('GET', KEYS[1])
local at = cmsgpack.unpack_limit(v, 4, 0)
local out = {}
while at >= 0 do
  local f = {}
  at, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9] = cmsgpack.unpack_limit(v, 10, at)
  if f[4] == nil then f[4] = f[3] end
  local numbers = 1
  for i = 1, 9 do
    if type(f[i]) ~= 'number' then numbers = 0 end
  end
  out[#out + 1] = { f[0], f[1], numbers }
end
return out`

// TestRedisBackRecordIsAGoneHolderBefore: the version before back records
// shares the tags (tb3, fw3, sw3) and so the states, in a rolling deploy. A
// holder back from an absence keeps its back record right after its own;
// read as that version reads, the record is a holder of a node no node is
// named (255 begins no UTF-8 string) whose until is 0: its absence ended
// long ago, and its refills, counts and reservations pass over it, and its
// next lease forgets it. (A run of that version's scripts on these states,
// and of these on what it wrote back, was checked by hand when back
// records came in.)
func TestRedisBackRecordIsAGoneHolderBefore(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := fakeClockRedis(t, srv.URL(), clk)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	var all []*rules.Rule
	for _, alg := range []rules.Algorithm{rules.TokenBucket, rules.FixedWindow, rules.SlidingWindow} {
		all = append(all, newRule(t, rules.Rule{Name: "before", Algorithm: alg, Limit: 100, Period: time.Second,
			Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}}))
	}
	acquire := func(r *rules.Rule, node string, consumed int64) {
		t.Helper()
		req := store.AcquireRequest{Rule: r, Key: "k", Node: node, Want: 1, Consumed: consumed, ConsumedAge: time.Millisecond}
		if _, err := s.Acquire(ctx, []store.AcquireRequest{req}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range all {
		acquire(r, "a", 0)
		acquire(r, "c", 0)
	}
	clk.Advance(1500 * time.Millisecond) // a's lease ended, and its window
	for _, r := range all {
		acquire(r, "a", 5) // back, with what its fallback admitted
	}
	keys, err := rdb.Keys(ctx, "allot:*").Result()
	if err != nil || len(keys) != len(all) {
		t.Fatalf("keys %v, %v: want one a rule", keys, err)
	}
	for _, key := range keys {
		v, err := rdb.Eval(ctx, readAsBefore, []string{key}).Slice()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		got := map[string][2]int64{}
		for _, rec := range v {
			f := rec.([]any)
			until, _ := f[1].(int64)
			numbers, _ := f[2].(int64)
			got[f[0].(string)] = [2]int64{until, numbers}
		}
		if len(got) != 3 || got["a"][0] <= 0 || got["c"][0] <= 0 {
			t.Fatalf("%s read as before: %v, want a, c and a's back record", key, got)
		}
		if rec, ok := got["\xffa"]; !ok || rec != [2]int64{0, 1} {
			t.Fatalf("%s read as before: a's back record %v (found %t), want a holder of until 0, its values numbers", key, rec, ok)
		}
	}
}
