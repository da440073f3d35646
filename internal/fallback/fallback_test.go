package fallback

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Gossip counts the fleet when it runs; without it the node takes the
// largest size it knows, so that a key new to every node cannot admit a
// burst on each (before, a key's own holders, or Config.Nodes of 1, won).
func TestNodesPrefersGossipThenTheLargestKnown(t *testing.T) {
	cases := []struct{ gossip, holders, seen, configured, want int }{
		{4, 2, 9, 8, 4},
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

func TestShareIsLimitOverN(t *testing.T) {
	r := rule(t, 100, 100, time.Second)
	t0 := time.Unix(1_800_000_000, 0)
	var s Share
	for i := range 25 {
		if d := s.AllowN(r, 4, t0, 1); !d.Allowed {
			t.Fatalf("request %d of burst/4 = 25 refused", i+1)
		}
	}
	d := s.AllowN(r, 4, t0, 1)
	if d.Allowed || d.RetryAfter != 40*time.Millisecond {
		t.Fatalf("26th: %+v, want refused for 40ms (rate/4 = 25/s)", d)
	}
	if !s.AllowN(r, 4, t0.Add(40*time.Millisecond), 1).Allowed {
		t.Fatal("one token after 1/(rate/N) refused")
	}
	// The fleet shrinks to 2: the share's rate doubles but no tokens appear.
	if s.AllowN(r, 2, t0.Add(40*time.Millisecond), 1).Allowed {
		t.Fatal("a smaller fleet minted a burst")
	}
	if !s.AllowN(r, 2, t0.Add(60*time.Millisecond), 1).Allowed {
		t.Fatal("rate/2 = 50/s gives a token every 20ms")
	}
}

// A key falling back after leases starts from what the fleet had left.
func TestShareCap(t *testing.T) {
	r := rule(t, 100, 100, time.Second)
	t0 := time.Unix(1_800_000_000, 0)
	var s Share
	s.Cap(r, 4, t0, 2)
	if got := admitted(&s, r, 4, t0); got != 2 {
		t.Fatalf("admitted %d after Cap(2), want 2", got)
	}
}

func TestShareRoundingToZeroDenies(t *testing.T) {
	r := rule(t, 5, 5, 15*time.Minute)
	var s Share
	if d := s.AllowN(r, 8, time.Unix(0, 0), 1); d.Allowed {
		t.Fatal("5 per 15 min over 8 nodes admitted: the fleet could pass 8")
	}
}

func TestSharesForgetIdleKeys(t *testing.T) {
	r := rule(t, 10, 10, time.Second)
	var s Shares
	t0 := time.Unix(1_800_000_000, 0)
	a := s.Get(r, "a", t0)
	if s.Get(r, "a", t0) != a {
		t.Fatal("the same key gave two shares")
	}
	s.Get(r, "b", t0.Add(2*time.Minute))
	if s.Len() != 1 {
		t.Fatalf("%d shares kept, want the idle one forgotten", s.Len())
	}
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
	var share Share
	t0 := time.Unix(1_800_000_000, 0)
	before := admitted(&share, r, members[1].Nodes(), t0)

	start := time.Now()
	members[3].Stop() // a crash: no leave message
	waitFor(t, 15*time.Second, func() bool {
		return members[0].Nodes() == 3 && members[1].Nodes() == 3 && members[2].Nodes() == 3
	}, "the others to notice the crash")
	t.Logf("crash noticed after %v", time.Since(start).Round(time.Millisecond))
	var grown Share
	after := admitted(&grown, r, members[1].Nodes(), t0)
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

func admitted(s *Share, r *rules.Rule, nodes int, now time.Time) int {
	n := 0
	for s.AllowN(r, nodes, now, 1).Allowed {
		n++
	}
	return n
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
