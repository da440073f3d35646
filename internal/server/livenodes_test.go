package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
)

// The allocator counts the distinct node ids that called Acquire or
// Release in the last 30 s and says so in Acquire's and GetRules' answers:
// a fleet size for the nodes that know no other.
func TestLiveNodes(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	c, _ := serveWith(t, server.Config{Store: memory(t), Clock: clk})
	acquire := func(node string) uint32 {
		t.Helper()
		resp, err := c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: node, Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Want: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetNodes()
	}
	nodes := func() uint32 {
		t.Helper()
		resp, err := c.GetRules(ctx(t), &allotv1.GetRulesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetNodes()
	}
	if n := nodes(); n != 0 {
		t.Fatalf("GetRules before any call: nodes %d, want 0", n)
	}
	for i, node := range []string{"n1", "n2", "n1"} {
		if n, want := acquire(node), []uint32{1, 2, 2}[i]; n != want {
			t.Fatalf("Acquire %d by %s: nodes %d, want %d", i, node, n, want)
		}
	}
	clk.Advance(20 * time.Second)
	if _, err := c.Release(ctx(t), &allotv1.ReleaseRequest{NodeId: "n3", Returns: []*allotv1.Return{{Rule: "tb", Key: "k"}}}); err != nil {
		t.Fatal(err)
	}
	if n := nodes(); n != 3 {
		t.Fatalf("after a Release by a third node: nodes %d, want 3", n)
	}
	// A call refused as invalid is no sign of life.
	if _, err := c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "bad", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Want: 1}}}); err == nil {
		t.Fatal("an Acquire without a key was accepted")
	}
	clk.Advance(15 * time.Second) // n1 and n2 last called 35 s ago, n3 15 s ago
	if n := nodes(); n != 1 {
		t.Fatalf("35 s after n1 and n2 called: nodes %d, want 1 (n3)", n)
	}
	if n := acquire("n2"); n != 2 {
		t.Fatalf("n2 back: nodes %d, want 2", n)
	}
}

// A node that names itself in GetRules is counted live, so that a fleet's
// nodes know its size before their first lease; a bad id is refused,
// naming the field, and counts nothing.
func TestGetRulesCountsTheNodeThatAsks(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	c, _ := serveWith(t, server.Config{Store: memory(t), Clock: clk})
	rulesAs := func(node string) (uint32, error) {
		t.Helper()
		resp, err := c.GetRules(ctx(t), &allotv1.GetRulesRequest{NodeId: node})
		return resp.GetNodes(), err
	}
	for i, node := range []string{"n1", "n2", "n1", ""} {
		if n, err := rulesAs(node); err != nil || n != []uint32{1, 2, 2, 2}[i] {
			t.Fatalf("GetRules %d by %q: nodes %d (%v), want %d", i, node, n, err, []uint32{1, 2, 2, 2}[i])
		}
	}
	if _, err := rulesAs(strings.Repeat("n", 200)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node_id") {
		t.Fatalf("a 200-byte node id: %v, want InvalidArgument naming node_id", err)
	}
	if n, _ := rulesAs(""); n != 2 {
		t.Fatalf("after a bad id: nodes %d, want 2", n)
	}
}

// The count holds at most 100,000 ids, the oldest forgotten first.
func TestLiveNodesAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("100,001 calls")
	}
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	// It counts ids, not time: a call's store deadline (100 ms by default,
	// on the real clock) must not fail one of 100,001 calls on a busy
	// machine under the race detector.
	srv, err := server.New(server.Config{Store: memory(t), Rules: testSet(t), Clock: clk, NewKeysPerNode: -1, StoreTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100_001 {
		rel := &allotv1.ReleaseRequest{NodeId: fmt.Sprintf("node-%d", i), Returns: []*allotv1.Return{{Rule: "tb", Key: "k"}}}
		if _, err := srv.Release(ctx(t), rel); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := srv.GetRules(ctx(t), &allotv1.GetRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := resp.GetNodes(); n != 100_000 {
		t.Fatalf("after 100,001 node ids: nodes %d, want the cap, 100,000", n)
	}
}

func testSet(t *testing.T) *rules.Set {
	t.Helper()
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A key's first request asks for the rule's rate divided by the nodes the
// node counted when it fetched the rules (want_rate_nodes): the first node
// of a cold fleet counted itself alone. The allocator divides by its own
// count instead, so that the first holder is lent its part and not the
// whole rate, which would leave the others none until it renewed; a want
// the node measured is lent as asked.
func TestFirstAskIsDividedByTheLiveNodes(t *testing.T) {
	set, err := rules.Parse("test", []byte("rules:\n  - {name: r, algorithm: token_bucket, limit: 1000, period: 1s, burst: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	c, _ := serveWith(t, server.Config{Store: memory(t), Clock: clk, Rules: set})
	for i := range 8 {
		if _, err := c.GetRules(ctx(t), &allotv1.GetRulesRequest{NodeId: fmt.Sprintf("n%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	rate := func(node string, lr *allotv1.LeaseRequest) float64 {
		t.Helper()
		resp, err := c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: node, Requests: []*allotv1.LeaseRequest{lr}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLeases()[0].GetRate()
	}
	for _, step := range []struct {
		name, node string
		lr         *allotv1.LeaseRequest
		want       float64
	}{
		{"the first node, which counted itself alone", "n0", &allotv1.LeaseRequest{Rule: "r", Key: "k", Want: 1, WantRate: 1000, WantRateNodes: 1}, 125},
		{"the second, which counted two", "n1", &allotv1.LeaseRequest{Rule: "r", Key: "k", Want: 1, WantRate: 500, WantRateNodes: 2}, 125},
		{"the last, which counted all eight", "n7", &allotv1.LeaseRequest{Rule: "r", Key: "k", Want: 1, WantRate: 125, WantRateNodes: 8}, 125},
		{"a measured want on another key", "n2", &allotv1.LeaseRequest{Rule: "r", Key: "m", Want: 1, WantRate: 600}, 600},
	} {
		if got := rate(step.node, step.lr); got != step.want {
			t.Errorf("%s: lent %v a second, want %v", step.name, got, step.want)
		}
	}
}
