package region

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/store"
)

// TestRegionSaysWhatItsNodesStillUse: a region whose node was told the
// whole rule (the region alone at the parent) keeps saying so to the
// parent after a second region arrives and the parent tells the first a
// half, until that node has asked again: the parent counts the first
// region at what its node's fallback may still admit, and tells the
// newcomer that nothing is left (docs/bounds.md, rule 5), never a half
// beside the node's whole.
func TestRegionSaysWhatItsNodesStillUse(t *testing.T) {
	tr := newTree(t, 1)
	g, _ := tr.set.Get("g")
	rs := tr.regions[0]
	ask := func(st store.Store, node string, want int64) store.Lease {
		t.Helper()
		got, err := st.Acquire(context.Background(), []store.AcquireRequest{{Rule: g, Key: "k", Node: node, Want: want}})
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	if l := ask(rs, "n1", 10); l.FallbackNodes != 1 || l.Granted == 0 {
		t.Fatalf("the first node of the only region: told %d, lent %d; want the whole rule (1) and tokens", l.FallbackNodes, l.Granted)
	}
	var regionTold, newcomer []int64
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		// Another node of the region keeps the key busy, so that the region
		// renews at the parent every refresh; n1 does not ask again.
		ask(rs, "n2", 10)
		if k := rs.keyLease(g, "k"); k != nil {
			regionTold = append(regionTold, int64(k.FallbackNodes()))
		}
		newcomer = append(newcomer, ask(tr.parent, "region-new", 0).FallbackNodes)
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the region was told %v; the newcomer %v", slices.Compact(slices.Clone(regionTold)), slices.Compact(slices.Clone(newcomer)))
	if slices.Max(regionTold) < 2 {
		t.Fatalf("the parent never told the first region less than the whole rule beside the newcomer: %v", regionTold)
	}
	for _, n := range newcomer {
		if n < maxFallbackNodes {
			t.Fatalf("the newcomer was told to divide by %d while the first region's node may still admit the whole rule: want none (2^31-1)", n)
		}
	}
}

// TestRegionTellsWhatItsNodesHold: a node lent most of a global key's
// burst holds it through a quiet spell while the parent's bucket refills.
// The region tells the parent what its nodes hold of what it lent them,
// beside its own tokens, so the parent's bucket refills only the room
// their tokens leave (rule 6 across the tree): a node of another region
// is then lent no more than the burst those tokens leave, and the calm
// second stays within b + 1.1·r.
func TestRegionTellsWhatItsNodesHold(t *testing.T) {
	tr := newTree(t, 2)
	calm, _ := tr.set.Get("calm")
	ask := func(st store.Store, node string, want, held int64) store.Lease {
		t.Helper()
		got, err := st.Acquire(context.Background(), []store.AcquireRequest{{Rule: calm, Key: "k", Node: node, Want: want, Held: held, HeldKnown: true}})
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	// Node a of region 0 is lent 900 of the burst of 1,000; its region's
	// first lease may take a round trip or two.
	var a int64
	for deadline := time.Now().Add(5 * time.Second); a < 900 && time.Now().Before(deadline); {
		a += ask(tr.regions[0], "a", 900-a, a).Granted
		time.Sleep(20 * time.Millisecond)
	}
	if a < 900 {
		t.Fatalf("node a was lent %d of the burst, want 900", a)
	}
	// It keeps them, unspent, and says so, while its region renews and the
	// parent's bucket has time to refill to its burst (5 s at 200/s).
	for range 25 {
		ask(tr.regions[0], "a", 0, 900)
		time.Sleep(200 * time.Millisecond)
	}
	// Node b of region 1 asks for the whole burst.
	var b int64
	for range 5 {
		b += ask(tr.regions[1], "b", 1000-b, b).Granted
		time.Sleep(50 * time.Millisecond)
	}
	bound := float64(calm.Burst) + 1.1*calm.Rate()
	t.Logf("node a holds %d; node b was lent %d; both spent in one second: %d (b + 1.1·r %.0f)", a, b, a+b, bound)
	if float64(a+b) > bound {
		t.Errorf("node a's %d and node b's %d may be spent in one second: %d, above b + 1.1·r = %.0f", a, b, a+b, bound)
	}
}

// TestRegionAsksByItsNodesDemand: a region's nodes say what their callers
// ask (150/s and 50/s) while they ask it for batches every 10 ms, refused
// or not, as busy nodes do. The region asks the parent for a share by what
// they say, 1.1 times their 200/s, not by how often they ask (100 batches
// of 50 a second, which it would read as 5,000/s): another holder at the
// parent that asks for the whole rate is lent the rest, 780/s. Once both
// nodes have given the key back, the region's demand goes with them: the
// other holder is lent the whole rate within 600 ms.
func TestRegionAsksByItsNodesDemand(t *testing.T) {
	tr := newTree(t, 1)
	g, _ := tr.set.Get("g")
	rs := tr.regions[0]
	ask := func(node string, demand float64) {
		t.Helper()
		_, err := rs.Acquire(context.Background(), []store.AcquireRequest{{Rule: g, Key: "k", Node: node, Want: 50,
			Held: 0, HeldKnown: true, Demand: demand}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ask("n1", 150)
		ask("n2", 50)
	}
	var rates []float64
	for range 5 {
		ask("n1", 150)
		ask("n2", 50)
		got, err := tr.parent.Acquire(context.Background(), []store.AcquireRequest{{Rule: g, Key: "k", Node: "other", WantRate: 1000}})
		if err != nil {
			t.Fatal(err)
		}
		rates = append(rates, got[0].Rate)
		time.Sleep(150 * time.Millisecond)
	}
	t.Logf("the other holder's shares beside the region: %v", rates)
	if last := rates[len(rates)-1]; last < 770 || last > 790 {
		t.Errorf("the other holder is lent %.0f/s beside the region, want 780 (the region holding 1.1 of its nodes' 200/s)", last)
	}
	ask("n1", 150)
	ask("n2", 50)
	if err := rs.Release(context.Background(), []store.Return{{Rule: g, Key: "k", Node: "n1"}, {Rule: g, Key: "k", Node: "n2"}}); err != nil {
		t.Fatal(err)
	}
	var after []float64
	for deadline := time.Now().Add(600 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, err := tr.parent.Acquire(context.Background(), []store.AcquireRequest{{Rule: g, Key: "k", Node: "other", WantRate: 1000}})
		if err != nil {
			t.Fatal(err)
		}
		if after = append(after, got[0].Rate); got[0].Rate == 1000 {
			break
		}
	}
	t.Logf("after the nodes gave the key back: %v", after)
	if after[len(after)-1] != 1000 {
		t.Errorf("the other holder is lent %v/s 600 ms after the region's nodes gave the key back, want the whole rate", after[len(after)-1])
	}
}
