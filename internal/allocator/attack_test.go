package allocator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// The attacks of issue 11, as a caller that can reach the allocator would
// make them, against a real allocator on Redis with the built-in rules. A
// node gives back only what it holds, and reports only what its fallback
// share could have admitted.

func attackAllocator(t *testing.T) (allotv1.AllocatorClient, *rules.Set) {
	t.Helper()
	set := uniqueRules(t, string(rules.ExampleYAML()))
	_, conn := start(t, allocator.Config{Rules: set, RedisURL: redistest.URL(t), StoreTimeout: 2 * time.Second, MaxInFlight: -1})
	return allotv1.NewAllocatorClient(conn), set
}

func ruleNamed(t *testing.T, set *rules.Set, suffix string) *rules.Rule {
	t.Helper()
	for _, r := range set.Rules() {
		if strings.HasSuffix(r.Name, suffix) {
			return r
		}
	}
	t.Fatalf("no rule %s", suffix)
	return nil
}

// A Check for the whole capacity, then a Release of as much, repeated:
// before, api-per-key admitted 4,000 in 126 ms (bound 202), tenant-hourly
// 1,000,000 in one window of 100,000, search-per-user 1,000 in one minute of
// 100. The Release credits nothing: the caller was lent nothing.
func TestAttackCheckThenRelease(t *testing.T) {
	api, set := attackAllocator(t)
	for _, suffix := range []string{"api-per-key", "tenant-hourly", "search-per-user"} {
		r := ruleNamed(t, set, suffix)
		var admitted int64
		start := time.Now()
		for range 20 {
			resp, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: r.Name, Key: "victim", Cost: r.Capacity()})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAllowed() {
				admitted += r.Capacity()
			}
			_, err = api.Release(ctx(t), &allotv1.ReleaseRequest{NodeId: "evil", Returns: []*allotv1.Return{
				{Rule: r.Name, Key: "victim", Tokens: r.Capacity(), Epoch: windowIndex(r)}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		bound := float64(r.Capacity()) + r.Rate()*(time.Since(start)+r.Lease.TTL).Seconds()
		t.Logf("%s: Check %d + Release, 20 times: admitted %d, bound %.0f", suffix, r.Capacity(), admitted, bound)
		if float64(admitted) > bound {
			t.Errorf("%s: admitted %d > burst + rate·(T + ttl) = %.0f", suffix, admitted, bound)
		}
	}
}

// windowIndex is the index of the window r is in now, as the store counts
// (a return into it is the most a Release could credit).
func windowIndex(r *rules.Rule) int64 {
	if r.Algorithm == rules.TokenBucket {
		return 0
	}
	return time.Now().UnixMicro() / r.Period.Microseconds()
}

// Fresh node ids that return tokens with their Acquire: before, each
// return was credited before the grant, 614 tokens in 127 ms against a
// bound of 202. A node that holds nothing gives back nothing.
func TestAttackReturnsFromFreshNodes(t *testing.T) {
	api, set := attackAllocator(t)
	r := ruleNamed(t, set, "api-per-key")
	var granted int64
	start := time.Now()
	for i := range 50 {
		resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: fmt.Sprintf("evil-%d", i), Requests: []*allotv1.LeaseRequest{
			{Rule: r.Name, Key: "victim", Want: r.Lease.Max, Returned: r.Capacity()}}})
		if err != nil {
			t.Fatal(err)
		}
		granted += resp.GetLeases()[0].GetGranted()
	}
	bound := float64(r.Capacity()) + r.Rate()*(time.Since(start)+r.Lease.TTL).Seconds()
	t.Logf("50 fresh nodes returning %d each: granted %d, bound %.0f", r.Capacity(), granted, bound)
	if float64(granted) > bound {
		t.Fatalf("granted %d > burst + rate·(T + ttl) = %.0f", granted, bound)
	}
}

// The same key twice in one Release would be credited twice: refused.
func TestAttackReleaseDuplicates(t *testing.T) {
	api, set := attackAllocator(t)
	r := ruleNamed(t, set, "api-per-key")
	ret := &allotv1.Return{Rule: r.Name, Key: "victim", Tokens: 10}
	_, err := api.Release(ctx(t), &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{ret, ret}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "returns[1]") {
		t.Fatalf("a Release naming one key twice: %v, want InvalidArgument naming returns[1]", err)
	}
}

// A consumption report of 2^40 on a key three real nodes hold: before, it
// put the key a whole capacity in debt and its users were denied for 12 s.
// Now it stops at the reporter's fallback allowance, a quarter of the burst
// here, as if it had admitted its share: the users wait what that costs.
func TestAttackHugeConsumption(t *testing.T) {
	api, set := attackAllocator(t)
	r := ruleNamed(t, set, "api-per-key") // burst 200, 1,000 a minute
	for i := range 3 {
		if _, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: fmt.Sprintf("real-%d", i), Requests: []*allotv1.LeaseRequest{
			{Rule: r.Name, Key: "victim", Want: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	// 170 left: the report can take at most burst/4 = 50 of them.
	if _, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "evil", Requests: []*allotv1.LeaseRequest{
		{Rule: r.Name, Key: "victim", Consumed: 1 << 40}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "real-0", Requests: []*allotv1.LeaseRequest{
		{Rule: r.Name, Key: "victim", Want: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	l := resp.GetLeases()[0]
	t.Logf("after a report of 2^40: a real node got %d of 100 (remaining %d)", l.GetGranted(), l.GetRemaining())
	if l.GetGranted()+l.GetRemaining() < 100 {
		t.Fatalf("a real node got %d and %d remain: the report took more than the reporter's share (50 of 170)", l.GetGranted(), l.GetRemaining())
	}
}

// One node sending 1,000-key Acquire batches of fresh keys: before, Redis
// grew 8 MB/s (1.4 → 61 MB in 7.6 s) and nothing stopped it. Now the node
// adds at most its --max-new-keys-per-node a second (plus one call in
// debt), and the rest of its calls are refused with a RetryInfo; fresh
// node ids each time escape that cap, and the global --redis-max-keys
// stops them.
func TestAttackNewKeyFlood(t *testing.T) {
	run := func(t *testing.T, cfg allocator.Config, freshNodes bool) (keys int64, refused int, elapsed time.Duration) {
		srv := redistest.Start(t) // DBSIZE counts this database alone
		cfg.Rules = uniqueRules(t, string(rules.ExampleYAML()))
		cfg.RedisURL, cfg.StoreTimeout, cfg.MaxInFlight = srv.URL(), 2*time.Second, -1
		_, conn := start(t, cfg)
		api := allotv1.NewAllocatorClient(conn)
		r := ruleNamed(t, cfg.Rules, "api-per-key")
		begin := time.Now()
		for b := range 20 {
			node := "evil"
			if freshNodes {
				node = fmt.Sprintf("evil-%d", b)
			}
			reqs := make([]*allotv1.LeaseRequest, 1000)
			for i := range reqs {
				reqs[i] = &allotv1.LeaseRequest{Rule: r.Name, Key: fmt.Sprintf("flood-%d-%d", b, i), Want: 1}
			}
			_, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: node, Requests: reqs})
			switch status.Code(err) {
			case codes.OK:
			case codes.ResourceExhausted:
				refused++
			default:
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // 20 calls of 1,000 over about a second
		}
		elapsed = time.Since(begin)
		time.Sleep(300 * time.Millisecond) // the store's size is polled every 100ms
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		n, err := rdb.DBSize(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n, refused, elapsed
	}
	t.Run("one node", func(t *testing.T) {
		const rate = 2000
		keys, refused, took := run(t, allocator.Config{NewKeysPerNode: rate}, false)
		bound := rate*(1+took.Seconds()) + 1000
		t.Logf("20 calls of 1,000 fresh keys in %v: %d keys in Redis (bound %.0f), %d calls refused", took.Round(time.Millisecond), keys, bound, refused)
		if float64(keys) > bound || refused == 0 {
			t.Fatalf("%d keys (bound %.0f), %d refused", keys, bound, refused)
		}
	})
	t.Run("fresh node ids", func(t *testing.T) {
		const max = 5000
		keys, refused, took := run(t, allocator.Config{RedisMaxKeys: max}, true)
		t.Logf("20 calls of 1,000 fresh keys from fresh node ids in %v: %d keys in Redis (cap %d, one call over at most), %d calls refused", took.Round(time.Millisecond), keys, max, refused)
		if keys > max+1000 || refused == 0 {
			t.Fatalf("%d keys past the cap of %d, %d refused", keys, max, refused)
		}
	})
}
