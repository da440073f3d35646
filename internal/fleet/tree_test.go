package fleet

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// A tree of real processes: a parent allocator on a Redis of its own, and
// regions under it, each an allocator process on its own Redis with
// --parent through a delay proxy of its own (in the region's process) and
// a proxy per node in front of it. The fleet's nodes are the regions'
// nodes, region i's in slots [i·perRegion, (i+1)·perRegion).
type tree struct {
	*fleet
	parent    *child
	regions   []*child
	perRegion int
}

// treeSpec is a tree's shape.
type treeSpec struct {
	rule       string // one rule in YAML, named "r", of scope global
	regions    int
	perRegion  int
	parentRTT  time.Duration // between each region and the parent
	regionRTT  time.Duration // between each node and its region
	configured bool
}

// globalBucket is tokenBucket's rule, of scope global.
func globalBucket(limit, burst int64) string {
	return tokenBucket(limit, burst) + "    scope: global\n"
}

// newTree starts the parent, then the regions, then the nodes, and stops
// them all, in the other order, when the test ends.
func newTree(t *testing.T, s treeSpec) *tree {
	t.Helper()
	yaml := "rules:\n" + strings.ReplaceAll(s.rule, "name: r", "name: "+ruleName())
	set, err := rules.Parse("test", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	n := s.regions * s.perRegion
	tr := &tree{perRegion: s.perRegion, fleet: &fleet{s: spec{rule: s.rule, roundTrip: s.regionRTT, nodes: n, configured: s.configured},
		rule: set.Rules()[0]}}
	tr.parent = startChild(t, yaml, redistest.Start(t).URL(), 0, 0)
	for i := range s.regions {
		c := startChild(t, yaml, redistest.Start(t).URL(), s.perRegion, s.regionRTT,
			childParentEnv+"="+tr.parent.alloc, childParentRTTEnv+"="+s.parentRTT.String(),
			childRegionEnv+"="+fmt.Sprintf("region-%d", i))
		tr.regions = append(tr.regions, c)
		for _, p := range c.proxies {
			tr.slots = append(tr.slots, &slot{proxy: p})
		}
	}
	t.Cleanup(func() {
		tr.closeNodes()
		var wg sync.WaitGroup
		for _, c := range tr.regions {
			wg.Go(c.stop)
		}
		wg.Wait()
		tr.parent.stop()
	})
	var wg sync.WaitGroup
	errs := make([]error, len(tr.slots))
	for i, sl := range tr.slots {
		wg.Go(func() { sl.c, errs[i] = tr.newNode(sl, fmt.Sprintf("node-%d", i)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	tr.gen = len(tr.slots)
	return tr
}

// region is the region of the node in slot i.
func (tr *tree) region(i int) int { return i / tr.perRegion }

// cut cuts region i's link to its parent (on) or restores it.
func (tr *tree) cut(t *testing.T, i int, on bool) {
	t.Helper()
	line := "restore\n"
	if on {
		line = "cut\n"
	}
	if _, err := tr.regions[i].stdin.Write([]byte(line)); err != nil {
		t.Fatalf("region %d: %v", i, err)
	}
}

// movingLoad offers twice the rule's rate in all, most of it (80%) to one
// region at a time, the next every period, the rest split evenly among
// the others.
func (tr *tree) movingLoad(period time.Duration) load {
	regions := len(tr.regions)
	total := 2 * tr.rule.Rate()
	hot := 0.8 * total / float64(tr.perRegion)
	cold := 0.2 * total / float64((regions-1)*tr.perRegion)
	return load{rate: func(node int, elapsed time.Duration) float64 {
		if tr.region(node) == int(elapsed/period)%regions {
			return hot
		}
		return cold
	}, peak: hot}
}

// phases is what each region admitted in each period of the run, the
// loaded region's first when moving (movingLoad's), else region 0's.
func (tr *tree) phases(r *run, period time.Duration, moving bool) string {
	var b strings.Builder
	regions := len(tr.regions)
	for p := time.Duration(0); p < r.length; p += period {
		hot := 0
		if moving {
			hot = int(p/period) % regions
		}
		fmt.Fprint(&b, " [")
		for k := range regions {
			i := (hot + k) % regions
			if k > 0 {
				b.WriteString(" ")
			}
			fmt.Fprint(&b, r.admittedBetween(func(node int) bool { return tr.region(node) == i }, p, p+period))
		}
		b.WriteString("]")
	}
	return b.String()
}

// The tree: a parent and three regions, each with its own Redis
// and four nodes, 150 ms between a region and the parent and 1 ms between
// a node and its region, the load moving between regions every 2 s. The
// whole tree keeps the rule's bounds, and admits near what one perfect
// limiter would.
func TestRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("12s tree run")
	}
	t.Parallel()
	takeTurn(t)
	tr := newTree(t, treeSpec{rule: globalBucket(1000, 100), regions: 3, perRegion: 4,
		parentRTT: 150 * time.Millisecond, regionRTT: time.Millisecond})
	r := tr.run(12*time.Second, tr.movingLoad(2*time.Second))
	got := r.report(t, "three regions 150 ms from the parent, the load moving between them every 2s")
	t.Logf("admitted per region in each 2 s (the loaded one first): %s", tr.phases(r, 2*time.Second, true))
	r.checkBounds(t)
	if got < 0.97 {
		// Known (docs/bounds.md, "Accuracy, short of target"): printed,
		// with the figure.
		t.Logf("SHORT OF TARGET, known: admitted/ideal %.4f, target 0.97: each move takes the newly loaded region a few of its renewals, "+
			"150 ms away, to be lent its share, and a region whose nodes still hold the leases their busy time sized overflows its pool "+
			"(docs/bounds.md, \"A tree's load moving between regions\")", got)
	}
}

// A region cut from the parent for 10 s, in the tree of TestRegions under
// a load spread evenly: the cut region lends its leases' tokens until they
// end, then its third of the rule on its fallback; the others lend the
// rest; the tree keeps its bounds throughout, and all its regions admit.
func TestRegionCutFromParent(t *testing.T) {
	if testing.Short() {
		t.Skip("16s tree run")
	}
	t.Parallel()
	takeTurn(t)
	tr := newTree(t, treeSpec{rule: globalBucket(1000, 100), regions: 3, perRegion: 4,
		parentRTT: 150 * time.Millisecond, regionRTT: time.Millisecond})
	const cutAt, cutFor = 3 * time.Second, 10 * time.Second
	go func() {
		time.Sleep(cutAt)
		tr.cut(t, 0, true)
		time.Sleep(cutFor)
		tr.cut(t, 0, false)
	}()
	each := 2 * tr.rule.Rate() / float64(len(tr.slots))
	r := tr.run(16*time.Second, load{rate: func(int, time.Duration) float64 { return each }, peak: each})
	got := r.report(t, "region 0 cut from the parent from 3 s to 13 s")
	t.Logf("admitted per region in each 2 s (region 0 first): %s", tr.phases(r, 2*time.Second, false))
	r.checkBounds(t)
	// From a TTL after the cut to its end, the cut region's nodes spend
	// what its fallback lends: b/3, then r/3, spent within a refresh.
	from, to := cutAt+tr.rule.Lease.TTL+200*time.Millisecond, cutAt+cutFor
	cut := r.admittedBetween(func(node int) bool { return tr.region(node) == 0 }, from, to)
	rest := r.admittedBetween(func(node int) bool { return tr.region(node) != 0 }, from, to)
	third := (float64(tr.rule.Burst) + tr.rule.Rate()*((to-from)+tr.rule.Lease.Refresh).Seconds()) / 3
	t.Logf("from %v to %v: the cut region admitted %d (its third of the rule: %.0f), the others %d; admitted/ideal %.3f", from, to, cut, third, rest, got)
	if float64(cut) > third {
		t.Errorf("the cut region admitted %d on its fallback, above its third of the rule, %.0f", cut, third)
	}
	if float64(cut) < third/2 || rest == 0 {
		t.Errorf("the cut region admitted %d on its fallback (its third: %.0f), the others %d: want both to admit", cut, third, rest)
	}
}

// The parent killed at 3 s and started again on its address and its Redis
// at 6 s: the regions lend their leases, then their thirds on their
// fallbacks, and lease again once it is back; the tree keeps its bounds.
func TestRegionsParentRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("10s tree run")
	}
	t.Parallel()
	takeTurn(t)
	s := treeSpec{rule: globalBucket(1000, 100), regions: 3, perRegion: 4,
		parentRTT: 150 * time.Millisecond, regionRTT: time.Millisecond}
	tr := newTree(t, s)
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(3 * time.Second)
		tr.parent.kill()
		time.Sleep(3 * time.Second)
		tr.parent = startChild(t, tr.parent.yaml, tr.parent.redis, 0, 0, childListenEnv+"="+tr.parent.alloc)
	}()
	each := 2 * tr.rule.Rate() / float64(len(tr.slots))
	r := tr.run(10*time.Second, load{rate: func(int, time.Duration) float64 { return each }, peak: each})
	<-restarted
	r.report(t, "the parent killed at 3 s, back at 6 s")
	t.Logf("admitted per region in each 2 s (region 0 first): %s", tr.phases(r, 2*time.Second, false))
	r.checkBounds(t)
	for i := range tr.regions {
		if n := r.admittedBetween(func(node int) bool { return tr.region(node) == i }, 8*time.Second, 10*time.Second); n == 0 {
			t.Errorf("region %d admitted nothing in the last 2 s, the parent back since 6 s", i)
		}
	}
}
