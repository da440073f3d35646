package region

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// treeRules: one global key of 1000/s, burst 100, and a regional rule.
const treeRules = `
rules:
  - name: g
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 100
    scope: global
    lease: { ttl: 1s, refresh: 100ms }
  - name: calm
    algorithm: token_bucket
    limit: 200
    period: 1s
    burst: 1000
    scope: global
    lease: { ttl: 10s, refresh: 1s }
  - name: local
    algorithm: token_bucket
    limit: 50
    period: 1s
    burst: 50
`

// serve runs the allocator's service over st on a real gRPC server on
// 127.0.0.1, and returns its address.
func serve(t *testing.T, st store.Store, set *rules.Set) string {
	t.Helper()
	srv, err := server.New(server.Config{Store: st, Rules: set, Logger: quiet, NewKeysPerNode: -1, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// tree is a parent allocator on a memory store and regions under it, each
// a region.Store over a memory store of its own, served as an allocator.
type tree struct {
	set     *rules.Set
	parent  *store.Memory
	regions []*Store
	addrs   []string
}

func newTree(t *testing.T, regions int, configure ...func(*Config)) *tree {
	t.Helper()
	set, err := rules.Parse("tree.yaml", []byte(treeRules))
	if err != nil {
		t.Fatal(err)
	}
	tr := &tree{set: set, parent: store.NewMemory(clock.Real())}
	t.Cleanup(func() { tr.parent.Close() })
	parentAddr := serve(t, tr.parent, set)
	for i := range regions {
		local := store.NewMemory(clock.Real())
		t.Cleanup(func() { local.Close() })
		cfg := Config{Name: fmt.Sprintf("region-%c", 'a'+i), Parent: parentAddr, Local: local, Logger: quiet}
		for _, f := range configure {
			f(&cfg)
		}
		rs, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		tr.regions = append(tr.regions, rs)
		tr.addrs = append(tr.addrs, serve(t, rs, set))
	}
	return tr
}

// nodes starts perRegion SDK nodes in each region, each knowing the
// tree's whole count of nodes, region r's in [r·perRegion, (r+1)·perRegion).
func (tr *tree) nodes(t *testing.T, perRegion int) []*client.Client {
	t.Helper()
	var nodes []*client.Client
	for r, addr := range tr.addrs {
		for i := range perRegion {
			c, err := client.New(client.Config{Allocators: []string{addr}, NodeID: fmt.Sprintf("node-%d-%d", r, i),
				Nodes: len(tr.addrs) * perRegion, Registerer: prometheus.NewRegistry(), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			nodes = append(nodes, c)
		}
	}
	return nodes
}

// TestTreeStaysWithinTheBound: two regions of two nodes each, every node
// offering about eight times the global rule's rate on one key, for three
// seconds. Every window of the admissions over all four nodes stays within
// b + r·(T + L), L the parent's lease TTL, both regions are lent tokens,
// and no node's lease outlives the region's tokens it was lent from.
func TestTreeStaysWithinTheBound(t *testing.T) {
	tr := newTree(t, 2)
	var lent, clamped, over atomic.Int64
	for _, rs := range tr.regions {
		rs.lent = func(ttl, live time.Duration) {
			lent.Add(1)
			if ttl < time.Second {
				clamped.Add(1)
			}
			if ttl > live || ttl > time.Second {
				over.Add(1)
			}
		}
	}
	const perRegion = 2
	nodes := tr.nodes(t, perRegion)
	var regionOf []int
	for i := range nodes {
		regionOf = append(regionOf, i/perRegion)
	}

	const run = 3 * time.Second
	start := time.Now()
	admitted := make([][]time.Duration, len(nodes)*2) // per caller: when each admission was
	modes := make([]atomic.Int64, 3)
	var wg sync.WaitGroup
	for i := range admitted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := nodes[i/2]
			for time.Since(start) < run {
				d, err := c.AllowN(context.Background(), "g", "tenant", 1)
				if err == nil && d.Allowed {
					admitted[i] = append(admitted[i], time.Since(start))
					switch d.Mode {
					case client.ModeLease:
						modes[0].Add(1)
					case client.ModeFallback:
						modes[1].Add(1)
					default:
						modes[2].Add(1)
					}
				}
				time.Sleep(250 * time.Microsecond) // ~8x the rate over the eight callers
			}
		}()
	}
	wg.Wait()

	var all []time.Duration
	perRegionAdmitted := make([]int, len(tr.addrs))
	for i, a := range admitted {
		all = append(all, a...)
		perRegionAdmitted[regionOf[i/2]] += len(a)
	}
	slices.Sort(all)
	const b, r, L = 100.0, 1000.0, 1.0 // burst, rate, the parent's lease TTL (s)
	for _, T := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, run} {
		worst := worstWindow(all, T)
		bound := b + r*(T.Seconds()+L)
		t.Logf("worst %v: %d admitted, bound b+r(T+L) %.0f", T, worst, bound)
		if float64(worst) > bound {
			t.Errorf("%d admitted in %v, above b+r(T+L) = %.0f", worst, T, bound)
		}
	}
	t.Logf("admitted per region %v (%d in all over %v; ideal b+r·T %.0f); worst 1 s %d against b+1.1r %.0f; modes lease/fallback/other %d/%d/%d",
		perRegionAdmitted, len(all), run, b+r*run.Seconds(), worstWindow(all, time.Second), b+1.1*r,
		modes[0].Load(), modes[1].Load(), modes[2].Load())
	for i, n := range perRegionAdmitted {
		if n == 0 {
			t.Errorf("region %d admitted nothing", i)
		}
	}
	if over.Load() > 0 {
		t.Errorf("%d of %d node leases outlived the region's tokens (TTL above LiveFor or the rule's)", over.Load(), lent.Load())
	}
	if lent.Load() == 0 || clamped.Load() == 0 {
		t.Errorf("grants %d, shortened to the region's tokens' life %d: want some of each", lent.Load(), clamped.Load())
	}
	if modes[1].Load() > 0 {
		t.Errorf("%d admitted on fallback while every allocator answered", modes[1].Load())
	}
}

// worstWindow is the most admissions in any window of length T.
func worstWindow(at []time.Duration, T time.Duration) int {
	worst, j := 0, 0
	for i := range at {
		for j < len(at) && at[j] < at[i]+T {
			j++
		}
		worst = max(worst, j-i)
	}
	return worst
}
