package region

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/netdelay"
)

// TestNodeCutFromItsRegion: of a region's two nodes, one loses its link to
// the region for 6 s while both offer more than the global rule. The cut
// node falls back on its part of the region's part; the region holds that
// part back from the node it still answers (rule 4's reservation), so the
// tree keeps b + r·(T + L) in every window.
func TestNodeCutFromItsRegion(t *testing.T) {
	tr := newTree(t, 1)
	link, err := netdelay.Start(tr.addrs[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	var nodes []*client.Client
	for i, addr := range []string{link.Addr(), tr.addrs[0]} {
		c, err := client.New(client.Config{Allocators: []string{addr}, NodeID: fmt.Sprintf("node-%d", i),
			Registerer: prometheus.NewRegistry(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	const run, cutAt, cutFor = 9 * time.Second, 1500 * time.Millisecond, 6 * time.Second
	start := time.Now()
	admitted := make([][]time.Duration, 4) // two callers a node
	var fell [2]atomic.Int64
	var wg sync.WaitGroup
	for i := range admitted {
		wg.Go(func() {
			for time.Since(start) < run {
				d, err := nodes[i/2].AllowN(context.Background(), "g", "tenant", 1)
				if err == nil && d.Allowed {
					admitted[i] = append(admitted[i], time.Since(start))
					if d.Mode == client.ModeFallback {
						fell[i/2].Add(1)
					}
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	time.Sleep(cutAt)
	link.Cut(true)
	time.Sleep(cutFor)
	link.Cut(false)
	wg.Wait()
	var all []time.Duration
	for _, a := range admitted {
		all = append(all, a...)
	}
	slices.Sort(all)
	const b, r, L = 100.0, 1000.0, 1.0
	t.Logf("admitted: cut node %d (%d on its fallback), the other %d; worst 1 s %d, worst 6 s %d (bound %.0f)",
		len(admitted[0])+len(admitted[1]), fell[0].Load(), len(admitted[2])+len(admitted[3]),
		worstWindow(all, time.Second), worstWindow(all, 6*time.Second), b+r*(6+L))
	for _, T := range []time.Duration{time.Second, 3 * time.Second, 6 * time.Second, run} {
		if worst, bound := worstWindow(all, T), b+r*(T.Seconds()+L); float64(worst) > bound {
			t.Errorf("%d admitted in %v, above b+r(T+L) = %.0f", worst, T, bound)
		}
	}
	t.Logf("the region withheld %d for the cut node's fallback", tr.regions[0].Withheld())
	if fell[0].Load() == 0 || tr.regions[0].Withheld() == 0 {
		t.Errorf("the cut node admitted %d on its fallback, the region withheld %d for it: want both", fell[0].Load(), tr.regions[0].Withheld())
	}
}

// TestNodeCutWhereNoOtherAsks: a region's only node on a key is cut off
// from it for 6 s, while a node of another region asks for more than the
// whole rule. The cut node falls back on its part of its region's part;
// its region, asked by no one meanwhile, still withholds that part from
// the parent (it goes on taking it out of its lease, and so goes on
// asking for it), so the tree keeps b + r·(T + L).
func TestNodeCutWhereNoOtherAsks(t *testing.T) {
	tr := newTree(t, 2)
	link, err := netdelay.Start(tr.addrs[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	var nodes []*client.Client
	for i, addr := range []string{link.Addr(), tr.addrs[1]} {
		c, err := client.New(client.Config{Allocators: []string{addr}, NodeID: fmt.Sprintf("node-%d", i),
			Registerer: prometheus.NewRegistry(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	const run, cutAt, cutFor = 9 * time.Second, 1500 * time.Millisecond, 6 * time.Second
	start := time.Now()
	admitted := make([][]time.Duration, 4) // two callers a node
	var fell atomic.Int64
	var wg sync.WaitGroup
	for i := range admitted {
		wg.Go(func() {
			for time.Since(start) < run {
				d, err := nodes[i/2].AllowN(context.Background(), "g", "tenant", 1)
				if err == nil && d.Allowed {
					admitted[i] = append(admitted[i], time.Since(start))
					if d.Mode == client.ModeFallback {
						fell.Add(1)
					}
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	time.Sleep(cutAt)
	link.Cut(true)
	time.Sleep(cutFor)
	link.Cut(false)
	wg.Wait()
	var all []time.Duration
	for _, a := range admitted {
		all = append(all, a...)
	}
	slices.Sort(all)
	const b, r, L = 100.0, 1000.0, 1.0
	t.Logf("admitted: the cut node %d (%d on its fallback), the other region's %d; worst 1 s %d, worst 6 s %d (bound %.0f); its region withheld %d",
		len(admitted[0])+len(admitted[1]), fell.Load(), len(admitted[2])+len(admitted[3]),
		worstWindow(all, time.Second), worstWindow(all, 6*time.Second), b+r*(6+L), tr.regions[0].Withheld())
	for _, T := range []time.Duration{time.Second, 3 * time.Second, 6 * time.Second, run} {
		if worst, bound := worstWindow(all, T), b+r*(T.Seconds()+L); float64(worst) > bound {
			t.Errorf("%d admitted in %v, above b+r(T+L) = %.0f", worst, T, bound)
		}
	}
	if fell.Load() == 0 {
		t.Errorf("the cut node admitted nothing on its fallback")
	}
}
