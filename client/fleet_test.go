package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// fleet is a real allocator on a real Redis and several in-process nodes.
type fleet struct {
	t         *testing.T
	rulesFile string // when set, the allocator serves it and Reload re-reads it
	redis     *redistest.Server
	rdb       *redis.Client
	set       *rules.Set
	alloc     *allocator.Allocator
	served    chan error
	addr      string
	nodes     []*client.Client
}

func newFleet(t *testing.T, rulesYAML string, nodes int, cfg func(i int, c *client.Config)) *fleet {
	t.Helper()
	return newFleetWith(t, rulesYAML, "", nodes, cfg)
}

// newFleetWith is newFleet whose allocator serves rulesFile, when set.
func newFleetWith(t *testing.T, rulesYAML, rulesFile string, nodes int, cfg func(i int, c *client.Config)) *fleet {
	t.Helper()
	set, err := rules.Parse("test", []byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, redis: redistest.Start(t), set: set, rulesFile: rulesFile}
	f.rdb = redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	t.Cleanup(func() { f.rdb.Close() })
	f.startAllocator("127.0.0.1:0")
	t.Cleanup(f.stopAllocator)
	for i := range nodes {
		c := client.Config{Allocators: []string{f.addr}, NodeID: fmt.Sprintf("node-%d", i), Nodes: nodes,
			Registerer: prometheus.NewRegistry()}
		if cfg != nil {
			cfg(i, &c)
		}
		n, err := client.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		f.nodes = append(f.nodes, n)
	}
	return f
}

func (f *fleet) startAllocator(listen string) {
	f.t.Helper()
	cfg := allocator.Config{Listen: listen, Rules: f.set, RedisURL: f.redis.URL(), StoreTimeout: time.Second}
	if f.rulesFile != "" {
		cfg.Rules, cfg.RulesFile = nil, f.rulesFile
	}
	a, err := allocator.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.alloc, f.addr, f.served = a, a.Addr(), make(chan error, 1)
	go func() { f.served <- a.Serve() }()
}

func (f *fleet) stopAllocator() {
	if f.alloc == nil {
		return
	}
	f.alloc.Stop()
	<-f.served
	f.alloc = nil
}

// evalCalls is how many scripts Redis has run: the store calls.
func (f *fleet) evalCalls() int64 {
	info, err := f.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			var calls int64
			fmt.Sscanf(line[strings.Index(line, "calls=")+len("calls="):], "%d", &calls)
			total += calls
		}
	}
	return total
}

// load drives each node at its own rate and counts admissions per second.
type load struct {
	start    time.Time
	admitted [][]atomic.Int64 // [node][second]
	fallback []atomic.Int64   // [second]: decisions in fallback mode
	modes    [4]atomic.Int64
}

// run offers rates[i] requests per second to node i on rule/key for d.
// between, if set, runs once a second with the second's index.
func (f *fleet) run(rule, key string, rates []float64, d time.Duration, between func(sec int)) *load {
	secs := int(d/time.Second) + 1
	l := &load{start: time.Now(), admitted: make([][]atomic.Int64, len(f.nodes)), fallback: make([]atomic.Int64, secs)}
	for i := range l.admitted {
		l.admitted[i] = make([]atomic.Int64, secs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			drive(ctx, n, rule, key, rates[i], l, i)
		}()
	}
	if between != nil {
		tick := time.NewTicker(time.Second)
		for sec := 1; ; sec++ {
			select {
			case <-tick.C:
				between(sec)
				continue
			case <-ctx.Done():
			}
			break
		}
		tick.Stop()
	}
	wg.Wait()
	return l
}

func drive(ctx context.Context, n *client.Client, rule, key string, rate float64, l *load, node int) {
	const step = 2 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	var owed float64
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			owed += rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				d, err := n.AllowN(ctx, rule, key, 1)
				if err != nil {
					continue
				}
				l.modes[d.Mode].Add(1)
				sec := int(now.Sub(l.start) / time.Second)
				if sec >= len(l.fallback) {
					continue
				}
				if d.Mode == client.ModeFallback {
					l.fallback[sec].Add(1)
				}
				if d.Allowed {
					l.admitted[node][sec].Add(1)
				}
			}
		}
	}
}

func (l *load) total() (sum int64) {
	for i := range l.admitted {
		sum += l.node(i)
	}
	return sum
}

func (l *load) node(i int) (sum int64) {
	for s := range l.admitted[i] {
		sum += l.admitted[i][s].Load()
	}
	return sum
}

func (l *load) second(s int) (sum int64) {
	for i := range l.admitted {
		sum += l.admitted[i][s].Load()
	}
	return sum
}

const fleetRules = `
rules:
  - name: hot
    algorithm: token_bucket
    limit: 2000
    period: 1s
    burst: 2000
    lease: { min: 1, max: 1000, ttl: 1s, refresh: 100ms }
`

func uniform(n int, each float64) []float64 {
	r := make([]float64, n)
	for i := range r {
		r[i] = each
	}
	return r
}

// Eight nodes drive one key at twice its limit for ten seconds: the fleet
// stays within guarantee 2's bound and reaches 95% of the ideal.
func TestFleetAccuracyAtTwiceTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("10s fleet run")
	}
	f := newFleet(t, fleetRules, 8, nil)
	r, _ := f.set.Get("hot")
	calls0 := f.evalCalls()
	const T = 10 * time.Second
	l := f.run("hot", "k", uniform(8, 2*float64(r.Limit)/8), T, nil)
	calls := f.evalCalls() - calls0
	admitted := l.total()
	rate, burst, ttl := r.Rate(), float64(r.Burst), r.Lease.TTL.Seconds()
	ideal := burst + rate*T.Seconds()
	bound := burst + rate*(T.Seconds()+ttl)
	t.Logf("admitted %d over %v: %.3f of the ideal %.0f (bound %.0f); store calls %d = %.1f per 1,000 admitted; modes lease %d fallback %d",
		admitted, T, float64(admitted)/ideal, ideal, bound, calls, 1000*float64(calls)/float64(admitted),
		l.modes[client.ModeLease].Load(), l.modes[client.ModeFallback].Load())
	if float64(admitted) > bound {
		t.Fatalf("admitted %d > burst + rate·(T + ttl) = %.0f", admitted, bound)
	}
	if float64(admitted) < 0.95*ideal {
		t.Fatalf("admitted %d < 95%% of the ideal %.0f", admitted, ideal)
	}
}

// One node carries 90% of the traffic: it gets most of the limit.
func TestFleetSkewedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("5s fleet run")
	}
	f := newFleet(t, fleetRules, 8, nil)
	r, _ := f.set.Get("hot")
	offered := 2 * float64(r.Limit)
	rates := uniform(8, 0.1*offered/7)
	rates[0] = 0.9 * offered
	const T = 5 * time.Second
	l := f.run("hot", "k", rates, T, nil)
	hot, total := l.node(0), l.total()
	ideal := float64(r.Burst) + r.Rate()*T.Seconds()
	t.Logf("hot node admitted %d of %d (%.2f); fleet %.3f of the ideal; a limit/N split would cap it at %.0f",
		hot, total, float64(hot)/float64(total), float64(total)/ideal, ideal/8)
	if float64(hot) < 0.7*float64(total) {
		t.Fatalf("the hot node got %d of %d: the limit is not following the load", hot, total)
	}
	if float64(total) < 0.9*ideal {
		t.Fatalf("fleet admitted %d, under 90%% of the ideal %.0f", total, ideal)
	}
}

const outageRules = `
rules:
  - name: hot
    algorithm: token_bucket
    limit: 2000
    period: 1s
    burst: 200
    lease: { min: 1, max: 200, ttl: 1s, refresh: 100ms }
`

// The allocator dies a third of the way in and comes back at two thirds.
// Nodes fall back to limit/N once their leases are spent, the fleet stays
// within the limit plus what the leases held, and after the restart every
// node is back on leases within a few refresh intervals, by itself.
func TestFleetSurvivesAllocatorRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("9s fleet run")
	}
	f := newFleet(t, outageRules, 8, nil)
	r, _ := f.set.Get("hot")
	var killed, restored time.Time
	l := f.run("hot", "k", uniform(8, 2*float64(r.Limit)/8), 9*time.Second, func(sec int) {
		switch sec {
		case 3:
			killed = time.Now()
			f.stopAllocator()
		case 6:
			restored = time.Now()
			f.startAllocator(f.addr)
		}
	})
	for s := range 9 {
		t.Logf("second %d: admitted %d, fallback decisions %d", s, l.second(s), l.fallback[s].Load())
	}
	// While down: at most the burst, the rate for the time down, and what
	// the leases held when the allocator died (a lease is at most
	// lease.max per node, and here far less: keys were starved).
	down := restored.Sub(killed).Seconds()
	var admittedDown int64
	for s := 3; s < 6; s++ {
		admittedDown += l.second(s)
	}
	bound := float64(r.Burst) + r.Rate()*down + float64(8*r.Lease.Max)
	strict := float64(r.Burst) + r.Rate()*down + 0.25*r.Rate()
	t.Logf("down %.2fs: admitted %d; limit %.0f; bound with all leases full %.0f", down, admittedDown, r.Rate()*down, bound)
	if float64(admittedDown) > strict {
		t.Fatalf("admitted %d while the allocator was down, above burst + rate·down + a quarter second of leases = %.0f", admittedDown, strict)
	}
	if float64(admittedDown) < 0.7*r.Rate()*down {
		t.Fatalf("admitted %d while down: the fallback allowance (limit/8 per node) should keep about %.0f", admittedDown, r.Rate()*down)
	}
	if l.fallback[4].Load() == 0 {
		t.Fatal("no fallback decisions while the allocator was down")
	}
	// Back on leases: the last two seconds hold no fallback decision.
	if n := l.fallback[7].Load() + l.fallback[8].Load(); n != 0 {
		t.Fatalf("%d fallback decisions more than a second after the restart", n)
	}
	// What the nodes admitted in fallback is debited, but only the debt the
	// bucket would not have repaid by refilling since: no stall afterwards.
	if after := l.second(6) + l.second(7) + l.second(8); float64(after) < 0.85*3*r.Rate() {
		t.Fatalf("admitted %d in the 3s after the restart, under 85%% of %.0f: the key stalled paying for the outage", after, 3*r.Rate())
	}
	// Before the outage the leases kept the fleet near the limit too.
	if before := l.second(1) + l.second(2); float64(before) < 0.9*2*r.Rate() {
		t.Fatalf("admitted %d in seconds 1-2 on leases, want at least 90%% of %.0f", before, 2*r.Rate())
	}
	for i, n := range f.nodes {
		if n.Nodes() != 8 {
			t.Errorf("node %d divides by %d, want 8", i, n.Nodes())
		}
	}
}

// A key new to every node of a fleet without gossip: each node's first
// share is burst/N with N the most holders it has seen on any key, not
// Config.Nodes (1 by default). Before, four nodes admitted a full burst
// each on a key none had leased: four bursts.
func TestFreshKeyWithoutGossipIsConservative(t *testing.T) {
	f := newFleet(t, `
rules:
  - name: r
    algorithm: token_bucket
    limit: 100
    period: 1m
`, 4, func(i int, c *client.Config) { c.Nodes = 0 })
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range f.nodes { // every node leases one key: the allocator counts 4 holders
		n.Allow(ctx, "r", "warm")
	}
	for time.Now().Before(deadline) {
		seen := 0
		for _, n := range f.nodes {
			n.Allow(ctx, "r", "warm")
			if n.Nodes() == 4 {
				seen++
			}
		}
		if seen == len(f.nodes) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, n := range f.nodes {
		if n.Nodes() != 4 {
			t.Fatalf("node %d divides by %d after leasing a key with 4 holders, want 4", i, n.Nodes())
		}
	}
	f.stopAllocator()
	var admitted int
	for _, n := range f.nodes {
		for range 200 {
			if n.Allow(ctx, "r", "fresh") {
				admitted++
			}
		}
	}
	t.Logf("4 nodes without gossip admitted %d on a key none had seen, burst 100", admitted)
	if admitted > 100 {
		t.Fatalf("admitted %d on a fresh key across 4 nodes, more than its burst of 100", admitted)
	}
}

// What a strict rule admits on its fallback allowance while the allocator is
// down is debited once it is back. Before, it was never reported: the key
// had its whole limit again after the outage.
func TestStrictFallbackIsReported(t *testing.T) {
	f := newFleet(t, `
rules:
  - name: s
    algorithm: sliding_log
    limit: 10
    period: 1h
    failure: open
`, 1, nil)
	n, ctx := f.nodes[0], context.Background()
	f.stopAllocator()
	admitted := 0
	for range 5 {
		if d, err := n.AllowN(ctx, "s", "k", 1); err == nil && d.Allowed && d.Mode == client.ModeFallback {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of 5 on the fallback allowance (10 an hour on one node)", admitted)
	}
	f.startAllocator(f.addr)
	deadline := time.Now().Add(5 * time.Second)
	var d client.Decision
	for time.Now().Before(deadline) {
		var err error
		if d, err = n.AllowN(ctx, "s", "k", 1); err == nil && d.Mode == client.ModeStrict && d.Remaining < 9 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// 10 - 5 reported - the checks since, each 1.
	if d.Mode != client.ModeStrict || d.Remaining > 4 {
		t.Fatalf("after the allocator came back: %+v; the 5 admitted while it was down were not debited", d)
	}
}

// The key table is capped: a new key beyond Lease.MaxKeys gets no state on
// the node and is decided by the allocator for each request; the count and
// the refusals are exported.
func TestKeyTableCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFleet(t, `
rules:
  - name: r
    algorithm: token_bucket
    limit: 100
    period: 1m
`, 1, func(i int, c *client.Config) { c.Lease.MaxKeys, c.Registerer = 3, reg })
	n, ctx := f.nodes[0], context.Background()
	modes := map[client.Mode]int{}
	for i := range 5 {
		d, err := n.AllowN(ctx, "r", fmt.Sprintf("k%d", i), 1)
		if err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", i, d, err)
		}
		modes[d.Mode]++
	}
	if modes[client.ModeStrict] != 2 {
		t.Fatalf("decisions by mode %v: want the 2 keys beyond the cap of 3 decided by the allocator (strict)", modes)
	}
	if got := gaugeValue(t, reg, "allot_client_keys"); got != 3 {
		t.Fatalf("allot_client_keys %v, want 3", got)
	}
	if got := gaugeValue(t, reg, "allot_client_keys_over_cap_total"); got != 2 {
		t.Fatalf("allot_client_keys_over_cap_total %v, want 2", got)
	}
	// The allocator saw the keys beyond the cap: 100 - 1 each.
	if d, err := n.AllowN(ctx, "r", "k4", 1); err != nil || d.Mode != client.ModeStrict || d.Remaining != 98 {
		t.Fatalf("a key beyond the cap again: %+v, %v; want a strict decision with 98 left", d, err)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
