package fallback

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// N is the largest size the node knows, gossip's included: a node cut off
// from the pool counts itself alone in gossip, and must still divide by
// the holders the allocator keeps its part for.
func TestNodesIsTheLargestKnown(t *testing.T) {
	cases := []struct{ gossip, holders, seen, configured, want int }{
		{4, 2, 9, 8, 9},
		{1, 8, 0, 1, 8}, // alone in gossip, one of eight holders
		{0, 2, 0, 8, 8},
		{0, 8, 0, 1, 8},
		{0, 0, 8, 1, 8}, // a new key, no gossip, the default Config.Nodes: the fleet seen elsewhere
		{0, 3, 8, 1, 8},
		{0, 0, 0, 0, 1},
	}
	for _, c := range cases {
		if got := Nodes(c.gossip, c.holders, c.seen, c.configured); got != c.want {
			t.Errorf("Nodes(%d, %d, %d, %d) = %d, want %d", c.gossip, c.holders, c.seen, c.configured, got, c.want)
		}
	}
}

func rule(t *testing.T, limit, burst int64, period time.Duration) *rules.Rule {
	r := rules.Rule{Name: "r", Algorithm: rules.TokenBucket, Limit: limit, Burst: burst, Period: period}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	return &r
}

// Four nodes gossip on loopback; when one stops without a word the others'
// count drops, so their share grows, within the failure-detection time.
func TestGossipCountsLiveNodes(t *testing.T) {
	var members []*Gossip
	join := func(name, role string) *Gossip {
		cfg := GossipConfig{Name: name, Role: role, Fast: true}
		if len(members) > 0 {
			cfg.Join = []string{members[0].Addr()}
		}
		g, err := Join(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Stop() })
		members = append(members, g)
		return g
	}
	for i := range 4 {
		join(fmt.Sprintf("node-%d", i), RoleNode)
	}
	alloc := join("alloc-0", RoleAllocator)
	waitFor(t, 15*time.Second, func() bool {
		for _, g := range members {
			if g.Nodes() != 4 {
				return false
			}
		}
		return true
	}, "every member to count 4 nodes (the allocator is not one)")
	_ = alloc

	r := rule(t, 100, 100, time.Second)
	before := admitted(NewAllowance(), r, members[1].Nodes(), 0)

	start := time.Now()
	members[3].Stop() // a crash: no leave message
	waitFor(t, 15*time.Second, func() bool {
		return members[0].Nodes() == 3 && members[1].Nodes() == 3 && members[2].Nodes() == 3
	}, "the others to notice the crash")
	t.Logf("crash noticed after %v", time.Since(start).Round(time.Millisecond))
	after := admitted(NewAllowance(), r, members[1].Nodes(), 0)
	if before != 25 || after != 33 {
		t.Fatalf("fallback burst %d with 4 nodes, %d with 3; want 25 and 33", before, after)
	}

	start = time.Now()
	if err := members[2].Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return members[0].Nodes() == 2 }, "a graceful leave")
	t.Logf("leave noticed after %v", time.Since(start).Round(time.Millisecond))
}

func admitted(a *Allowance, r *rules.Rule, nodes int, now time.Duration) int {
	n := 0
	for {
		res, _ := a.Decide(r, nodes, Windows{}, now, 1)
		if !res.Allowed {
			return n
		}
		n++
	}
}

func waitFor(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A member bound to all interfaces or to a host name advertises an address
// its peers can reach, never 0.0.0.0.
func TestGossipAdvertisesReachableAddress(t *testing.T) {
	for _, bind := range []string{"0.0.0.0:0", "localhost:0"} {
		g, err := Join(GossipConfig{Name: "n-" + bind, Bind: bind, Fast: true})
		if err != nil {
			t.Fatalf("bind %s: %v", bind, err)
		}
		if strings.HasPrefix(g.Addr(), "0.0.0.0:") {
			t.Errorf("bind %s advertises %s", bind, g.Addr())
		}
		g.Stop()
	}
}
