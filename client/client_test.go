package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// memoryAllocator runs an allocator on the embedded store.
func memoryAllocator(t testing.TB, rulesYAML string) *allocator.Allocator {
	t.Helper()
	set, err := rules.Parse("test", []byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(allocator.Config{Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	return a
}

func newClient(t testing.TB, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

const apiRules = `
rules:
  - name: slow
    algorithm: token_bucket
    limit: 100
    period: 1h
    lease: { min: 10, max: 10, ttl: 5s }
  - name: fast
    algorithm: token_bucket
    limit: 1000000
    period: 1s
  - name: login
    algorithm: sliding_log
    limit: 3
    period: 1h
    failure: closed
  - name: window
    algorithm: fixed_window
    limit: 5
    period: 1h
`

func waitUntil(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leased waits until decisions on the key come from a lease.
func leased(t testing.TB, c *client.Client, rule, key string) {
	t.Helper()
	waitUntil(t, 5*time.Second, func() bool {
		d, err := c.AllowN(context.Background(), rule, key, 1)
		return err == nil && d.Mode == client.ModeLease && d.Allowed
	}, "a lease on "+rule+"/"+key)
}

func TestBadInput(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	cases := []struct {
		rule, key string
		n         int64
		want      error
	}{
		{"nope", "k", 1, client.ErrUnknownRule},
		{"slow", "", 1, client.ErrInvalidKey},
		{"slow", string(make([]byte, 513)), 1, client.ErrInvalidKey},
		{"slow", "bad\xff\xfekey", 1, client.ErrInvalidKey}, // a key is UTF-8, as on the wire
		{"window", "\xc3", 1, client.ErrInvalidKey},
		{"slow", "k", 0, client.ErrInvalidCost},
		{"slow", "k", -1, client.ErrInvalidCost},
		{"slow", "k", 101, client.ErrCostAboveCapacity},
	}
	for _, tc := range cases {
		if _, err := c.AllowN(ctx, tc.rule, tc.key, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("AllowN(%q, %d-byte key, %d) = %v, want %v", tc.rule, len(tc.key), tc.n, err, tc.want)
		}
	}
	if c.Allow(ctx, "nope", "k") {
		t.Error("Allow on an unknown rule passed")
	}
	if _, err := client.New(client.Config{}); err == nil {
		t.Error("New without allocators or rules succeeded")
	}
	if _, err := client.New(client.Config{Allocators: []string{a.Addr()}, NodeID: "node-\xff"}); err == nil ||
		!strings.Contains(err.Error(), "NodeID") {
		t.Errorf("New with a NodeID that is not UTF-8: %v, want an error naming Config.NodeID", err)
	}
	if _, err := client.New(client.Config{Rules: []client.Rule{{Name: "x", Algorithm: "gcra", Limit: 1, Period: time.Second}}}); err == nil {
		t.Error("New with a bad rule succeeded")
	}
}

func TestLeaseStrictAndWindow(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(t, c, "slow", "k")
	// Strict: the allocator decides every request, exactly.
	for i := range 3 {
		d, err := c.AllowN(ctx, "login", "alice", 1)
		if err != nil || !d.Allowed || d.Mode != client.ModeStrict || d.Remaining != int64(2-i) {
			t.Fatalf("login %d: %+v %v", i+1, d, err)
		}
	}
	d, err := c.AllowN(ctx, "login", "alice", 1)
	if err != nil || d.Allowed || d.RetryAfter < 59*time.Minute {
		t.Fatalf("4th login: %+v %v, want refused for about an hour", d, err)
	}
	if d.Rule != "login" {
		t.Fatalf("decision names rule %q", d.Rule)
	}
	if r, ok := c.Rule("slow"); !ok || r.Limit != 100 || r.Period != time.Hour || r.Algorithm != "token_bucket" || r.LeaseMax != 10 {
		t.Fatalf("Rule(slow) = %+v, %v", r, ok)
	}
	if _, ok := c.Rule("nope"); ok {
		t.Fatal("Rule of an unknown name")
	}
	// A fixed window never admits more than its limit, lease or not.
	admitted := 0
	for range 50 {
		if c.Allow(ctx, "window", "w") {
			admitted++
		}
		time.Sleep(time.Millisecond)
	}
	if admitted > 5 {
		t.Fatalf("fixed window of 5 admitted %d", admitted)
	}
}

// AllowAll spends from every rule or from none.
func TestAllowAllSpendsAllOrNothing(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(t, c, "fast", "k")
	leased(t, c, "slow", "k")
	// Drain "slow" locally: its lease holds at most 10.
	for c.Allow(ctx, "slow", "k") {
	}
	before, _ := c.AllowN(ctx, "fast", "k", 1)
	d, err := c.AllowAll(ctx, 1, client.RuleKey{Rule: "fast", Key: "k"}, client.RuleKey{Rule: "slow", Key: "k"})
	if err != nil || d.Allowed || d.Rule != "slow" {
		t.Fatalf("AllowAll with slow exhausted: %+v %v", d, err)
	}
	after, _ := c.AllowN(ctx, "fast", "k", 1)
	if before.Mode == client.ModeLease && after.Mode == client.ModeLease && after.Remaining != before.Remaining-1 {
		t.Fatalf("fast went %d -> %d across a refused AllowAll: it paid for a request that never ran", before.Remaining, after.Remaining)
	}
	if _, err := c.AllowAll(ctx, 1, client.RuleKey{Rule: "login", Key: "a"}, client.RuleKey{Rule: "login", Key: "b"}); !errors.Is(err, client.ErrTwoStrict) {
		t.Fatalf("two strict rules: %v", err)
	}
	d, err = c.AllowAll(ctx, 1, client.RuleKey{Rule: "fast", Key: "k"}, client.RuleKey{Rule: "login", Key: "bob"})
	if err != nil || !d.Allowed {
		t.Fatalf("fast and a fresh login: %+v %v", d, err)
	}
}

// A cold start with no allocator: rules from Config, decisions from the
// fallback allowance; failure: closed rules deny.
func TestNoAllocatorFallsBack(t *testing.T) {
	c := newClient(t, client.Config{
		Allocators: []string{deadAddr(t)}, Nodes: 4,
		Rules: []client.Rule{
			{Name: "open", Algorithm: "token_bucket", Limit: 100, Period: time.Hour},
			{Name: "shut", Algorithm: "token_bucket", Limit: 100, Period: time.Hour, Failure: "closed"},
			{Name: "strict", Algorithm: "sliding_log", Limit: 100, Period: time.Hour, Failure: "open"},
		},
		StartTimeout: 50 * time.Millisecond,
	})
	ctx := context.Background()
	admitted := 0
	for range 100 {
		d, err := c.AllowN(ctx, "open", "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Mode != client.ModeFallback {
			t.Fatalf("mode %v without an allocator", d.Mode)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 25 {
		t.Fatalf("admitted %d of limit 100 over 4 nodes, want 25", admitted)
	}
	waitUntil(t, 5*time.Second, func() bool {
		d, _ := c.AllowN(ctx, "shut", "fresh", 1)
		return !d.Allowed && d.Mode == client.ModeFallback
	}, "a closed rule to deny once the allocator is known down")
	d, err := c.AllowN(ctx, "strict", "k", 1)
	if err != nil || !d.Allowed || d.Mode != client.ModeFallback {
		t.Fatalf("strict open rule without allocator: %+v %v", d, err)
	}
}

// A node with no rules to decide by does not start: before, New returned a
// client that refused every request, whatever each rule's failure mode,
// until an allocator answered.
func TestColdStartWithoutRulesFails(t *testing.T) {
	start := time.Now()
	c, err := client.New(client.Config{Allocators: []string{deadAddr(t)}, StartTimeout: 50 * time.Millisecond})
	if err == nil {
		ok := c.Allow(context.Background(), "api-per-key", "k")
		c.Close()
		t.Fatalf("New with the allocator down and no Config.Rules succeeded (Allow on a rule: %v)", ok)
	}
	if !errors.Is(err, client.ErrNoRules) || !strings.Contains(err.Error(), "Config.Rules") {
		t.Fatalf("error %v, want ErrNoRules naming Config.Rules", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("New took %v to fail; StartTimeout is 50ms", took)
	}
	// The same with rules of its own starts, on its fallback allowance.
	c = newClient(t, client.Config{Allocators: []string{deadAddr(t)}, StartTimeout: 50 * time.Millisecond,
		Rules: []client.Rule{{Name: "own", Algorithm: "token_bucket", Limit: 10, Period: time.Hour}}})
	if d, err := c.AllowN(context.Background(), "own", "k", 1); err != nil || !d.Allowed || d.Mode != client.ModeFallback {
		t.Fatalf("a node with its own rules: %+v, %v", d, err)
	}
	if _, err := c.AllowN(context.Background(), "api-per-key", "k", 1); !errors.Is(err, client.ErrUnknownRule) {
		t.Fatalf("a rule in neither set: %v, want ErrUnknownRule", err)
	}
}

// Wait queues callers, at most MaxWaiters per key; the rest are refused at
// once; a cancelled caller leaves the queue.
func TestWait(t *testing.T) {
	c := newClient(t, client.Config{
		Allocators: []string{deadAddr(t)}, MaxWaiters: 2,
		Rules: []client.Rule{{Name: "paced", Algorithm: "token_bucket", Limit: 5, Period: time.Second, Burst: 1}},
	})
	ctx := context.Background()
	if err := c.Wait(ctx, "paced", "k"); err != nil { // the burst of 1
		t.Fatal(err)
	}
	// Three callers at once, a token every 200ms: two queue, one is refused.
	var wg sync.WaitGroup
	var ok, full atomic.Int64
	start := time.Now()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := c.Wait(ctx, "paced", "k"); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, client.ErrQueueFull):
				full.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 2 || full.Load() != 1 {
		t.Fatalf("%d admitted, %d refused as queue full; want 2 and 1", ok.Load(), full.Load())
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("two waiters passed in %v at 5/s: the queue did not wait", took)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := c.Wait(cctx, "paced", "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}
	if err := c.Wait(ctx, "paced", "k"); err != nil {
		t.Fatalf("Wait after a cancelled waiter left: %v", err)
	}
}

// Close leaves no goroutine behind, gossip and lease loop included.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Gossip: &client.GossipConfig{Fast: true}})
	if err != nil {
		t.Fatal(err)
	}
	leased(t, c, "fast", "k")
	c.Allow(context.Background(), "login", "x")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AllowN(context.Background(), "fast", "k", 1); err == nil {
		d, _ := c.AllowN(context.Background(), "fast", "k", 1)
		if d.Allowed {
			t.Fatal("a closed client still admits")
		}
	}
}

// Four nodes gossip on loopback with the allocator out of reach: each
// admits burst/4; when one leaves, the others' share grows to burst/3.
func TestGossipSizesTheFallbackShare(t *testing.T) {
	dead := deadAddr(t)
	rs := []client.Rule{{Name: "r", Algorithm: "token_bucket", Limit: 120, Period: time.Hour}}
	var nodes []*client.Client
	for i := range 4 {
		cfg := client.Config{Allocators: []string{dead}, Rules: rs, StartTimeout: 10 * time.Millisecond,
			NodeID: fmt.Sprintf("g%d", i), Gossip: &client.GossipConfig{Fast: true}}
		if i > 0 {
			cfg.Gossip.Join = []string{nodes[0].GossipAddr()}
		}
		nodes = append(nodes, newClient(t, cfg))
	}
	waitUntil(t, 20*time.Second, func() bool {
		for _, n := range nodes {
			if n.Nodes() != 4 {
				return false
			}
		}
		return true
	}, "four nodes in gossip")
	burst := func(c *client.Client, key string) int {
		n := 0
		for c.Allow(context.Background(), "r", key) {
			n++
		}
		return n
	}
	if got := burst(nodes[0], "a"); got != 30 {
		t.Fatalf("fallback burst with 4 nodes = %d, want 120/4", got)
	}
	start := time.Now()
	nodes[3].Close()
	waitUntil(t, 10*time.Second, func() bool { return nodes[0].Nodes() == 3 && nodes[1].Nodes() == 3 }, "the others to see 3 nodes")
	t.Logf("share regrown %v after a node left", time.Since(start).Round(time.Millisecond))
	if got := burst(nodes[1], "b"); got != 40 {
		t.Fatalf("fallback burst with 3 nodes = %d, want 120/3", got)
	}
}

// A New that failed can be tried again with the same registerer.
func TestNewAfterFailureReusesRegisterer(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	reg := prometheus.NewRegistry()
	cfg := client.Config{Allocators: []string{deadAddr(t)}, Registerer: reg,
		Rules:  []client.Rule{{Name: "r", Algorithm: "token_bucket", Limit: 1, Period: time.Second}},
		Gossip: &client.GossipConfig{Bind: busy.Addr().String()}}
	if _, err := client.New(cfg); err == nil {
		t.Fatal("New joined gossip on a port in use")
	}
	cfg.Gossip = nil
	c := newClient(t, cfg)
	if _, err := client.New(cfg); err == nil || !strings.Contains(err.Error(), "Registerer") {
		t.Fatalf("a second Client on the same registerer: %v", err)
	}
	_ = c
}

// A failure: closed rule never admits without the allocator: a key it does
// not serve yet is decided centrally, so a fleet cannot pass the limit on
// new keys whatever each node believes the fleet size to be.
func TestClosedRuleNewKeysAreDecidedCentrally(t *testing.T) {
	a := memoryAllocator(t, `
rules:
  - name: shut
    algorithm: token_bucket
    limit: 5
    period: 1h
    failure: closed
`)
	var nodes []*client.Client
	for range 3 {
		nodes = append(nodes, newClient(t, client.Config{Allocators: []string{a.Addr()}, CheckTimeout: 5 * time.Second}))
	}
	admitted := 0
	for _, c := range nodes {
		for range 5 {
			if c.Allow(context.Background(), "shut", "new-key") {
				admitted++
			}
		}
	}
	if admitted > 5 {
		t.Fatalf("3 nodes admitted %d on a new key of a closed 5-per-hour rule, want 5 at most (each node alone would allow 5)", admitted)
	}
	// Fewer than 5 when a grant lands on a node after its last attempt
	// (a loaded machine: 1 or 2). What a node holds and does not spend
	// comes back or is spent on its next request: the fleet, asking on,
	// spends the hour's 5 and never a sixth.
	waitUntil(t, 10*time.Second, func() bool {
		for _, c := range nodes {
			if c.Allow(context.Background(), "shut", "new-key") {
				admitted++
			}
		}
		if admitted > 5 {
			t.Fatalf("3 nodes admitted %d on a new key of a closed 5-per-hour rule, want 5 at most", admitted)
		}
		return admitted == 5
	}, "the fleet to spend the hour's 5")
}

// A node finds each of its rules by name, and no other, whether it holds
// a few rules (scanned) or many (hashed): each rule decides by its own
// limit.
func TestRulesFoundByNameFewOrMany(t *testing.T) {
	for _, n := range []int{1, 2, 8, 9, 40} {
		t.Run(fmt.Sprintf("rules=%d", n), func(t *testing.T) {
			var y strings.Builder
			y.WriteString("rules:\n")
			for i := range n {
				fmt.Fprintf(&y, "  - name: r%d\n    algorithm: token_bucket\n    limit: %d\n    period: 1h\n", i, i+1)
			}
			c := newClient(t, client.Config{Allocators: []string{memoryAllocator(t, y.String()).Addr()}})
			ctx := context.Background()
			for i := range n {
				d, err := c.AllowN(ctx, fmt.Sprintf("r%d", i), "k", 1)
				if err != nil || d.Rule != fmt.Sprintf("r%d", i) || d.Limit != int64(i+1) {
					t.Errorf("r%d: %+v %v, want a decision of r%d, limit %d", i, d, err, i, i+1)
				}
			}
			for _, name := range []string{"r", fmt.Sprintf("r%d", n), "R0", ""} {
				if _, err := c.AllowN(ctx, name, "k", 1); !errors.Is(err, client.ErrUnknownRule) {
					t.Errorf("%q: %v, want ErrUnknownRule", name, err)
				}
			}
		})
	}
}
