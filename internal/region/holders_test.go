package region

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/store"
)

// TestReservationLastsUntilTheNextRequest: a holder back from its
// fallback goes on admitting there until the answer to its return reaches
// it, so its part stays withheld from the others until its next request,
// as the store keeps a returning holder's reservation (markBack). A step
// table of named instants on the region's count of holders, at 100/s with
// two holders (a part of 1/2 each, 50/s).
func TestReservationLastsUntilTheNextRequest(t *testing.T) {
	const (
		sent      = 0
		leaseEnds = time.Second // after its request: node a's lease here ends, and it is absent
		cutAt     = 3 * time.Second
		backAt    = 3 * time.Second // its request, said on its fallback, arrives
		otherAsks = 3500 * time.Millisecond
		nextAsk   = 4 * time.Second // its next request, served
		later     = 5 * time.Second
	)
	ls := lenders{m: map[lenderID]*lender{}}
	id := lenderID{"g", "k"}
	ask := func(node string, now time.Duration, onFallback bool) {
		ls.hold(id, holding{node: node, now: now, until: now + leaseEnds, absence: time.Minute, parent: 1, fromOnFallback: onFallback},
			func(int, int64, float64) (g store.Lease) { return g })
	}
	ask("a", sent, false)
	ask("b", sent, false)
	ask("a", sent, false) // (told 2 now that b holds the key too)
	var withheld int64
	reserve := func(now time.Duration) int64 {
		before := withheld
		ls.reserve(id, now, 100, func(n int64, _ float64) int64 { withheld += n; return n })
		return withheld - before
	}
	steps := []struct {
		name string
		at   time.Duration
		do   func()
		want int64
	}{
		{"a absent since its lease ended: 2 s of 50/s", cutAt, nil, 100},
		{"a back on its fallback", backAt, func() { ask("a", backAt, true) }, 0},
		{"another node asks while a's answer is on its way", otherAsks, nil, 25},
		{"a's next request, served", nextAsk, nil, 25},
		{"a served since: nothing withheld", later, func() { ask("a", nextAsk, false) }, 0},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := reserve(s.at); got != s.want {
			t.Errorf("%s (at %v): withheld %d, want %d", s.name, s.at, got, s.want)
		}
	}
}
