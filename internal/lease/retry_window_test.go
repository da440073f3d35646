package lease

import (
	"fmt"
	"testing"
	"time"
)

// A window rule's key refused on its lease says to retry when the store's
// window frees what it needs: its end, for a fixed window the fleet has
// spent, not the rule's average spacing of a token (period/limit, 100 ms
// here, which had a daily window of 50 answer 28m48s; the allocator's
// Check said midnight). Its ResetAfter is the window's end too.
func TestWindowRetryAfterIsTheWindowsEnd(t *testing.T) {
	g := newRig(t, nil)
	var v Verdict
	g.run([]step{
		{name: "t0: first lease", at: 0, do: func(g *rig) { g.decide("win10", "k", 1) }},
		{name: "t1: granted", at: time.Millisecond, do: func(g *rig) { g.answer() }},
		// (After the first lease's end: the key stays until then, idle or not.)
		{name: "t2: the window spent to its limit, from this node and another", at: 1100 * time.Millisecond, do: func(g *rig) {
			g.acquireAs("other", "win10", "k", 100, 0)
			for range 200 {
				if v = g.decide("win10", "k", 1); !v.Allowed && !v.Wait {
					break
				}
				g.answer()
			}
		}, want: func(g *rig) error {
			if v.Allowed || v.Wait || v.Fallback {
				return fmt.Errorf("verdict %+v, want refused on the lease", v)
			}
			// The window ends at 10 s; the refusal came at 1.1 s and a few.
			if v.RetryAfter < 8*time.Second || v.RetryAfter > 9*time.Second {
				return fmt.Errorf("retry after %v, want the window's end, about 9 s away", v.RetryAfter)
			}
			if v.ResetAfter != v.RetryAfter {
				return fmt.Errorf("reset after %v, want the window's end, %v", v.ResetAfter, v.RetryAfter)
			}
			return nil
		}},
	})
}
