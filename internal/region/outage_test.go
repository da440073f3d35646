package region

import (
	"context"
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
	"github.com/allot-dev/allot/internal/netdelay"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// TestParentOutage: a region whose parent stops lends its global key what
// its lease holds, until that lease ends, and then the rule over the
// regions out of its fallback allowance (the parent counted one region:
// the rule's rate), never more: its node, answered by the region, decides
// on leases throughout and never falls back itself. Once the parent is
// back on its address the region leases again. Every window of the run
// stays within b + r·(T + L).
func TestParentOutage(t *testing.T) {
	set, err := rules.Parse("tree.yaml", []byte(treeRules))
	if err != nil {
		t.Fatal(err)
	}
	parentStore := store.NewMemory(clock.Real())
	defer parentStore.Close()
	srv, err := server.New(server.Config{Store: parentStore, Rules: set, Logger: quiet, NewKeysPerNode: -1, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	parent := grpc.NewServer()
	srv.Register(parent)
	go parent.Serve(lis)

	local := store.NewMemory(clock.Real())
	t.Cleanup(func() { local.Close() })
	rs, err := New(Config{Name: "region-a", Parent: addr, Local: local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	node, err := client.New(client.Config{Allocators: []string{serve(t, rs, set)}, NodeID: "n1", Registerer: prometheus.NewRegistry(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })

	start := time.Now()
	var admitted [40]atomic.Int64 // per 100 ms
	var at []time.Duration        // every admission
	var fallback atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Since(start) < 4*time.Second {
			d, err := node.AllowN(context.Background(), "g", "k", 1)
			if err == nil && d.Allowed {
				admitted[min(int(time.Since(start)/(100*time.Millisecond)), len(admitted)-1)].Add(1)
				at = append(at, time.Since(start))
				if d.Mode == client.ModeFallback {
					fallback.Add(1)
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	time.Sleep(time.Second)
	parent.Stop() // the parent goes at 1 s
	stopped := time.Since(start)
	time.Sleep(1500 * time.Millisecond)
	lis, err = net.Listen("tcp", addr) // and comes back on its address at 2.5 s
	if err != nil {
		t.Fatalf("the parent's address: %v", err)
	}
	parent = grpc.NewServer()
	srv.Register(parent)
	go parent.Serve(lis)
	defer parent.Stop()
	back := time.Since(start)
	<-done

	sum := func(from, to time.Duration) (n int64) {
		for i := int(from / (100 * time.Millisecond)); i < int(to/(100*time.Millisecond)) && i < len(admitted); i++ {
			n += admitted[i].Load()
		}
		return n
	}
	// The region's lease ends at most its TTL (1 s) after the parent
	// stopped; from then until the parent is back, only the fallback
	// allowance lends: the rule's rate, from the lease's end, and what it
	// lent is spent within a refresh (100 ms).
	from := stopped + time.Second + 100*time.Millisecond
	dark := sum(from, back)
	t.Logf("admitted: before the stop %d, in the parent's outage %d (after the region's lease could end: %d), after it came back %d; the region's fallback lent %d",
		sum(0, stopped), sum(stopped, back), dark, sum(back, 4*time.Second), rs.FellBack())
	const b, r, L = 100.0, 1000.0, 1.0 // the rule's burst, rate and lease TTL (s)
	if most := b + r*((back-from).Seconds()+0.1); float64(dark) > most {
		t.Errorf("%d admitted after the region's lease ended, with the parent down: above the rule's burst and its rate over that time and a refresh, %.0f", dark, most)
	}
	if dark == 0 || rs.FellBack() == 0 {
		t.Errorf("the region cut off from its parent lent nothing past its lease (%d admitted then; its fallback lent %d): want the rule over the regions", dark, rs.FellBack())
	}
	for _, T := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		if worst, bound := worstWindow(at, T), b+r*(T.Seconds()+L); float64(worst) > bound {
			t.Errorf("%d admitted in %v, above b+r(T+L) = %.0f", worst, T, bound)
		}
	}
	if fallback.Load() != 0 {
		t.Errorf("%d admitted on the node's fallback while the region answered", fallback.Load())
	}
	if n := sum(3500*time.Millisecond, 4*time.Second); n == 0 {
		t.Errorf("nothing admitted a second after the parent came back")
	}
	if n := sum(0, stopped); n == 0 {
		t.Errorf("nothing admitted before the outage")
	}
}

// TestRegionCutFromItsParent: of two regions, one loses its link to the
// parent for two seconds while every node offers about eight times the
// global rule. Past its lease the cut region lends out of its fallback
// allowance, the rule over the two regions the parent counted, and no
// more; the parent holds that part for it meanwhile, so the tree keeps
// b + r·(T + L) in every window, and both regions admit throughout.
func TestRegionCutFromItsParent(t *testing.T) {
	var link *netdelay.Proxy
	tr := newTree(t, 2, func(c *Config) {
		if c.Name != "region-a" {
			return
		}
		p, err := netdelay.Start(c.Parent, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		link, c.Parent = p, p.Addr()
	})
	const perRegion = 2
	nodes := tr.nodes(t, perRegion)
	const run, cutAt, cutFor = 4 * time.Second, time.Second, 2 * time.Second
	start := time.Now()
	admitted := make([][]time.Duration, len(nodes)*2) // per caller, two per node
	var nodeFallback atomic.Int64
	var wg sync.WaitGroup
	for i := range admitted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < run {
				d, err := nodes[i/2].AllowN(context.Background(), "g", "tenant", 1)
				if err == nil && d.Allowed {
					admitted[i] = append(admitted[i], time.Since(start))
					if d.Mode == client.ModeFallback {
						nodeFallback.Add(1)
					}
				}
				time.Sleep(250 * time.Microsecond)
			}
		}()
	}
	time.Sleep(cutAt)
	link.Cut(true)
	cut := time.Since(start)
	time.Sleep(cutFor)
	sinceA, sinceB := tr.regions[0].Meters().SinceParent, tr.regions[1].Meters().SinceParent
	link.Cut(false)
	restored := time.Since(start)
	wg.Wait()

	var all []time.Duration
	regionAt := make([][]time.Duration, len(tr.addrs))
	for i, a := range admitted {
		all = append(all, a...)
		regionAt[i/2/perRegion] = append(regionAt[i/2/perRegion], a...)
	}
	slices.Sort(all)
	count := func(at []time.Duration, from, to time.Duration) (n int) {
		for _, x := range at {
			if x >= from && x < to {
				n++
			}
		}
		return n
	}
	const b, r, L, refresh = 100.0, 1000.0, 1.0, 0.1 // the rule's burst, rate, lease TTL and refresh (s)
	// The cut region's lease ends at most a TTL after the cut; from then
	// on its nodes spend only what its fallback allowance lent.
	from := cut + time.Second + 100*time.Millisecond
	darkA, darkB := count(regionAt[0], from, restored), count(regionAt[1], from, restored)
	t.Logf("admitted: region a %d, region b %d; after a's lease could end (%v of the cut): a %d, b %d; a's fallback lent %d; worst 1 s %d (b+1.1r %.0f)",
		len(regionAt[0]), len(regionAt[1]), (restored - from).Round(time.Millisecond), darkA, darkB, tr.regions[0].FellBack(),
		worstWindow(all, time.Second), b+1.1*r)
	for _, T := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, run} {
		if worst, bound := worstWindow(all, T), b+r*(T.Seconds()+L); float64(worst) > bound {
			t.Errorf("%d admitted in %v, above b+r(T+L) = %.0f", worst, T, bound)
		}
	}
	if most := (b + r*((restored-from).Seconds()+refresh)) / 2; float64(darkA) > most {
		t.Errorf("the cut region admitted %d past its lease: above its half of the rule over that time, %.0f", darkA, most)
	}
	if darkA == 0 || tr.regions[0].FellBack() == 0 {
		t.Errorf("the cut region admitted %d past its lease (its fallback lent %d): want half the rule", darkA, tr.regions[0].FellBack())
	}
	if darkB == 0 {
		t.Errorf("the region still joined to the parent admitted nothing while the other was cut")
	}
	if nodeFallback.Load() != 0 {
		t.Errorf("%d admitted on a node's fallback while every region answered its nodes", nodeFallback.Load())
	}
	// The meters: the cut region last heard its parent when the cut began;
	// every region lent no more than its nodes asked, nor than its parent
	// and its fallback gave it.
	if sinceA < cutFor/2 || sinceB > cutFor/2 {
		t.Errorf("at the cut's end the parent last answered region a %v ago and b %v ago: want about %v and a round trip", sinceA, sinceB, cutFor)
	}
	for i, rs := range tr.regions {
		m := rs.Meters()
		t.Logf("region %c: asked %d, lent %d (fallback %d), granted by the parent %d", 'a'+i, m.Asked, m.Lent, m.FellBack, m.Granted)
		if m.Lent > m.Asked || m.Lent > m.Granted+m.FellBack || m.Lent < int64(len(regionAt[i])) {
			t.Errorf("region %c: lent %d, asked %d, granted %d, fallback %d, its nodes admitted %d: want admitted <= lent <= asked, and lent <= granted + fallback",
				'a'+i, m.Lent, m.Asked, m.Granted, m.FellBack, len(regionAt[i]))
		}
	}
}

// A region that has never reached its parent lends a global key nothing
// unless it is told how many regions share the rule (Config.Regions): the
// rule over one region would be the whole rule beside the others. Told
// two, it lends half: b/2, then r/2.
func TestRegionNeverAnsweredDividesByRegions(t *testing.T) {
	set, err := rules.Parse("tree.yaml", []byte(treeRules))
	if err != nil {
		t.Fatal(err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	parent := dead.Addr().String()
	dead.Close() // nothing listens there: every call is refused at once
	for _, regions := range []int{0, 2} {
		local := store.NewMemory(clock.Real())
		t.Cleanup(func() { local.Close() })
		rs, err := New(Config{Name: "region-a", Parent: parent, Local: local, Logger: quiet, Regions: regions})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		g, _ := set.Get("g")
		var lent int64
		start := time.Now()
		for time.Since(start) < time.Second {
			got, err := rs.Acquire(context.Background(), []store.AcquireRequest{{Rule: g, Key: "k", Node: "n1", Want: 50}})
			if err != nil {
				t.Fatal(err)
			}
			lent += got[0].Granted
			time.Sleep(10 * time.Millisecond)
		}
		most := (float64(g.Burst) + g.Rate()*time.Since(start).Seconds()) / float64(max(regions, 1))
		t.Logf("regions %d: lent %d in 1 s, the parent never reached (the rule over them: %.0f)", regions, lent, most)
		switch {
		case regions == 0 && lent != 0:
			t.Errorf("a region told of no other lent %d of a key its parent never answered for: want 0", lent)
		case regions > 0 && (float64(lent) > most || float64(lent) < most/2):
			t.Errorf("a region told of %d regions lent %d in 1 s: want its part, %.0f at most and half of it at least", regions, lent, most)
		}
	}
}
