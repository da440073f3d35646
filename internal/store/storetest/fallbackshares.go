package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// The fallback allowances the store tells a key's holders (Lease.FallbackNodes:
// what each one's fallback divides the rule by) never sum above the rule,
// each counted at the least it may use until its next request: the count
// it was told, or the count it said it used when it sent, if fewer. The
// first holder of a cold fleet is told 1 and keeps its whole rule until it
// asks again; before, each newcomer was told the holders it found, and the
// first node's whole limit and the others' parts together passed the rule
// (the fleet simulator: a sliding window of 1,000 over 8 nodes, the first
// told 1 and cut off before it asked again, admitted 1,041 on fallbacks).
func testFallbackSharesFitTheRule(t *testing.T, h Harness) {
	s := h.New(t)
	for _, alg := range []rules.Algorithm{rules.TokenBucket, rules.FixedWindow, rules.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			r := rule(t, rules.Rule{Name: "fb-" + alg.String(), Algorithm: alg, Limit: 1000, Period: time.Second,
				Lease: rules.LeaseTuning{TTL: 10 * time.Second}})
			told := map[string]int64{}
			ask := func(node string, said int64) store.Lease {
				t.Helper()
				l := acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: node, Want: 1, FallbackNodes: said})
				if l.FallbackNodes < int64(l.Holders) {
					t.Fatalf("%s told to divide by %d with %d holders", node, l.FallbackNodes, l.Holders)
				}
				n := l.FallbackNodes
				if said > 0 {
					n = min(n, said)
				}
				told[node] = n
				var sum float64
				for _, n := range told {
					if n < 2147483647 { // (none: a fallback of l/(2^31-1) admits nothing)
						sum += 1 / float64(n)
					}
				}
				if sum > 1+1e-9 {
					t.Fatalf("after %s's request: the fallbacks divide by %v, their parts sum to %.4f of the rule", node, told, sum)
				}
				return l
			}
			// A cold fleet of 4, one by one: the first is told 1, the others nothing.
			if l := ask("n0", 0); l.FallbackNodes != 1 {
				t.Fatalf("the first holder told %d, want 1", l.FallbackNodes)
			}
			for i := 1; i < 4; i++ {
				if l := ask(fmt.Sprintf("n%d", i), 0); l.FallbackNodes != 2147483647 {
					t.Fatalf("n%d, beside n0's whole rule, told %d, want none (2^31-1)", i, l.FallbackNodes)
				}
			}
			// n0 asks again, saying it divides by 1 while its answer is on its
			// way: it is told 4, but counted at 1 until its next request.
			if l := ask("n0", 1); l.FallbackNodes != 4 {
				t.Fatalf("n0 again told %d, want 4", l.FallbackNodes)
			}
			if l := ask("n1", 2147483647); l.FallbackNodes != 2147483647 {
				t.Fatalf("n1 told %d while n0 may still divide by 1, want none", l.FallbackNodes)
			}
			ask("n0", 4)
			for i := 1; i < 4; i++ {
				if l := ask(fmt.Sprintf("n%d", i), 2147483647); l.FallbackNodes != 4 {
					t.Fatalf("n%d told %d once n0 divides by 4, want 4", i, l.FallbackNodes)
				}
			}
			// A node that does not say what it divides by is counted at what
			// it is told.
			if l := ask("n2", 0); l.FallbackNodes != 4 {
				t.Fatalf("n2 told %d in a settled fleet of 4, want 4", l.FallbackNodes)
			}
		})
	}
}
