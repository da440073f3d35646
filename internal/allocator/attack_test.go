package allocator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
// Now it stops at the reporter's fallback share, a quarter of the burst
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
