package lease

import (
	"fmt"
	"testing"
	"time"
)

// A share that overflows its key's cap gives the overflow back with the
// key's next request, which says the key still holds what it held when it
// overflowed, though it has spent since: the store credits an overflow only
// below its ceiling with that counted (a central limiter full then would
// have lost what the share earned). Said with what it holds after the
// spending, the overflow was credited as room the bucket never had and lent
// again beside the share's next tokens. (Rule r: a share of 1000/s, a cap
// of 100 tokens, the first lease 100.)
func TestOverflowIsReturnedAsHeldWhenFull(t *testing.T) {
	g := newRig(t, nil)
	k := func() *KeyLease { return g.key("r", "k") }
	var renewal time.Duration
	g.run([]step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		{name: "t1: answered: its cap, and the whole rate", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				renewal = mono(k().notBefore.Load()).sinceOrigin() - g.start
			},
			want: func(g *rig) error {
				if k().phase != phaseSharing || k().Tokens() != 100 || k().share.capTokens != 100 {
					return fmt.Errorf("phase %v, %d tokens, cap %d", k().phase, k().Tokens(), k().share.capTokens)
				}
				return nil
			}},
		{name: "t2: a sweep later, full: what it earned overflowed", at: 11 * time.Millisecond,
			want: func(g *rig) error {
				if s := k().share; s.overflow < 9 || s.fullAt != 100 {
					return fmt.Errorf("overflow %d, full at %d; want about 10, at 100", s.overflow, s.fullAt)
				}
				return nil
			}},
		{name: "t3: just before its renewal, 90 of its 100 spent", at: 12 * time.Millisecond,
			do: func(g *rig) {
				g.to(renewal - time.Microsecond)
				if v := g.decide("r", "k", 90); !v.Allowed || v.Fallback {
					t.Fatalf("the take: %+v", v)
				}
			}},
		{name: "t4: its next request gives the overflow back as held at the cap, not at the 10 left", at: 13 * time.Millisecond,
			do: func(g *rig) { g.to(renewal) },
			want: func(g *rig) error {
				r, err := g.last("k")
				if err != nil {
					return err
				}
				if r.Returned < 9 || r.Held != 100+r.Returned || k().Tokens() >= 100 {
					return fmt.Errorf("request %+v with %d tokens: want the overflow returned, held the cap of 100 with it", r, k().Tokens())
				}
				if s := k().share; s.overflow != 0 || s.fullAt != 0 {
					return fmt.Errorf("after the request: overflow %d, full at %d; want both cleared", s.overflow, s.fullAt)
				}
				return nil
			}},
	})
}
