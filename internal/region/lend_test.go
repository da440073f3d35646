package region

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/store"
)

func (tr *tree) rule(t *testing.T, name string) store.AcquireRequest {
	t.Helper()
	r, ok := tr.set.Get(name)
	if !ok {
		t.Fatalf("no rule %q", name)
	}
	return store.AcquireRequest{Rule: r}
}

func acquire(t *testing.T, s *Store, req store.AcquireRequest) store.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got, err := s.Acquire(ctx, []store.AcquireRequest{req})
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// A regional rule's request goes to the region's own store alone; a
// global one's to the parent, through the region's lease.
func TestOnlyGlobalRulesReachTheParent(t *testing.T) {
	tr := newTree(t, 1)
	rs := tr.regions[0]
	loc := tr.rule(t, "local")
	loc.Key, loc.Node, loc.Want = "k", "n1", 10
	if g := acquire(t, rs, loc); g.Granted != 10 {
		t.Fatalf("regional rule: granted %d, want 10", g.Granted)
	}
	glob := tr.rule(t, "g")
	glob.Key, glob.Node, glob.Want = "k", "n1", 10
	if g := acquire(t, rs, glob); g.Granted == 0 || g.Rate != 0 || g.Holders != 1 {
		t.Fatalf("global rule: %+v, want tokens only, one holder", g)
	}
	ctx := context.Background()
	atParent, err := tr.parent.Exists(ctx, []store.AcquireRequest{loc, glob})
	if err != nil {
		t.Fatal(err)
	}
	atRegion, err := rs.local.(store.Exister).Exists(ctx, []store.AcquireRequest{loc, glob})
	if err != nil {
		t.Fatal(err)
	}
	if atParent[0] || !atParent[1] || !atRegion[0] || atRegion[1] {
		t.Fatalf("state of (regional, global): at the parent %v, in the region %v; want [false true], [true false]", atParent, atRegion)
	}
}

// A retry (the same seq) is answered again, not lent again; what a node
// admitted on its fallback is taken from the region's lease; what it gives
// back is dropped.
func TestLendingAccounts(t *testing.T) {
	var answered atomic.Int64 // the region's Acquires answered by the parent
	tr := newTree(t, 1, func(c *Config) {
		c.Lease.Hooks.Acquired = func(int, int64, int64, time.Duration, error) { answered.Add(1) }
	})
	rs := tr.regions[0]
	req := tr.rule(t, "g")
	req.Key, req.Node, req.Want, req.Seq = "k", "n1", 10, 7
	first := acquire(t, rs, req)
	k := rs.keyLease(req.Rule, "k")
	held := k.Tokens()
	if again := acquire(t, rs, req); again != first || k.Tokens() != held {
		t.Fatalf("a retry: %+v (region holds %d), want %+v again (and %d)", again, k.Tokens(), first, held)
	}
	if first.TTL <= 0 || first.TTL > time.Second || first.TTL > k.LiveFor(clock.Real().Mono())+50*time.Millisecond {
		t.Fatalf("TTL %v against the rule's 1s and LiveFor %v", first.TTL, k.LiveFor(clock.Real().Mono()))
	}
	consumed := held + 5 // more than it holds: the rest is its debt
	for !rs.mgr.Idle() {
		rs.mgr.Sync()
	}
	held, calls := k.Tokens(), answered.Load()
	req.Seq, req.Want, req.Consumed, req.Returned = 8, 0, held+5, 3
	acquire(t, rs, req)
	if got, debt := k.Tokens(), k.Debt(); answered.Load() == calls && (got != 0 || debt != 5) {
		t.Fatalf("after a report of %d admitted on fallback the region holds %d, owes %d; want 0 and 5", consumed, got, debt)
	}
	if rs.Lost() != 3 {
		t.Fatalf("lost %d, want the 3 given back", rs.Lost())
	}
	// A second node: two holders. Each node's fallback divides the rule
	// so that their parts sum to the region's part at most: the newcomer
	// gets what the first leaves (none), and both the half of it once
	// each has asked again.
	P := func() int64 { return int64(max(k.FallbackNodes(), k.Holders(), 1)) }
	if first.FallbackNodes != P() {
		t.Fatalf("the first holder's fallback divides by %d, want the region's count at the parent, %d", first.FallbackNodes, P())
	}
	req2 := tr.rule(t, "g")
	req2.Key, req2.Node, req2.Want, req2.Seq = "k", "n2", 1, 1
	if g := acquire(t, rs, req2); g.Holders != 2 || g.FallbackNodes != maxFallbackNodes {
		t.Fatalf("second holder: holders %d, fallback nodes %d; want 2 and none left (%d)", g.Holders, g.FallbackNodes, maxFallbackNodes)
	}
	req.Seq, req.Consumed, req.Returned = 10, 0, 0
	if g := acquire(t, rs, req); g.FallbackNodes != 2*P() {
		t.Fatalf("the first holder again: fallback nodes %d, want %d", g.FallbackNodes, 2*P())
	}
	req2.Seq = 2
	if g := acquire(t, rs, req2); g.FallbackNodes != 2*P() {
		t.Fatalf("the second holder again: fallback nodes %d, want %d", g.FallbackNodes, 2*P())
	}
	rs.Release(context.Background(), []store.Return{{Rule: req.Rule, Key: "k", Node: "n2", Tokens: 1}})
	req.Seq = 11
	if g := acquire(t, rs, req); g.Holders != 1 {
		t.Fatalf("after n2 released: holders %d, want 1", g.Holders)
	}
}

// A region whose parent does not answer lends a global key nothing (it
// has no lease to lend from), within the call's deadline, and still serves
// its regional rules.
func TestNoParentNoGlobalTokens(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	tr := newTree(t, 0)
	local := store.NewMemory(clock.Real())
	defer local.Close()
	rs, err := New(Config{Name: "cut", Parent: dead, Local: local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	req := tr.rule(t, "g")
	req.Key, req.Node, req.Want = "k", "n1", 10
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err := rs.Acquire(ctx, []store.AcquireRequest{req, func() store.AcquireRequest {
		r := tr.rule(t, "local")
		r.Key, r.Node, r.Want = "k", "n1", 5
		return r
	}()})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("took %v, past the call's deadline", took)
	}
	if got[0].Granted != 0 || got[0].RetryAfter <= 0 || got[1].Granted != 5 {
		t.Fatalf("global %+v, regional %+v: want nothing with a retry, and the regional grant", got[0], got[1])
	}
}

// Envoy's service checks a global key against the region's lease: all of
// a cost or none, and a cost above the rule's capacity never.
func TestCheckOnAGlobalKey(t *testing.T) {
	var answered atomic.Int64
	tr := newTree(t, 1, func(c *Config) {
		c.Lease.Hooks.Acquired = func(int, int64, int64, time.Duration, error) { answered.Add(1) }
	})
	rs := tr.regions[0]
	r := tr.rule(t, "g").Rule
	ctx := context.Background()
	d, err := rs.Check(ctx, r, "k", 1)
	if err != nil || !d.Allowed || d.Limit != 1000 {
		t.Fatalf("first check: %+v, %v; want allowed (after the region's first lease)", d, err)
	}
	k := rs.keyLease(r, "k")
	for !rs.mgr.Idle() {
		rs.mgr.Sync()
	}
	held, calls := k.Tokens(), answered.Load()
	if held >= r.Capacity() {
		t.Skipf("the region holds the whole burst (%d): no cost between it and the capacity", held)
	}
	if d, err := rs.Check(ctx, r, "k", held+1); answered.Load() == calls && (err != nil || d.Allowed || k.Tokens() != held) {
		t.Fatalf("a check of %d with %d held: %+v, %v, holds %d after; want refused, nothing taken", held+1, held, d, err, k.Tokens())
	}
	if _, err := rs.Check(ctx, r, "k", r.Capacity()+1); err != store.ErrCostAboveCapacity {
		t.Fatalf("above capacity: %v", err)
	}
}

// A call of many keys new to the region is lent on each within the call:
// their first leases from the parent leave together.
func TestNewKeysLeaseTogether(t *testing.T) {
	tr := newTree(t, 1)
	rs := tr.regions[0]
	var reqs []store.AcquireRequest
	for i := range 50 {
		req := tr.rule(t, "g")
		req.Key, req.Node, req.Want = fmt.Sprintf("k%d", i), "n1", 1
		reqs = append(reqs, req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got, err := rs.Acquire(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g.Granted != 1 {
			t.Errorf("%s: granted %d, want 1", reqs[i].Key, g.Granted)
		}
	}
}
