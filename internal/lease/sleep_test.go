package lease

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A share whose key holds its cap, with its renewal queued and nothing
// asked for two sweeps, would earn nothing but overflow in the sweep: it
// sleeps (Dormant), out of the sweep, until a Take wakes it; waking, it
// earns what it would have meanwhile, which the cap gives back with the
// renewal. (Rule r: a share of 1000/s, a cap of 100 tokens, the first
// lease 100.)
func TestFullQuietShareSleepsUntilATakeWakesIt(t *testing.T) {
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
				if k().phase != phaseSharing || k().Tokens() != 100 || k().share.capTokens != 100 || !k().is(bitQueued) {
					return fmt.Errorf("phase %v, %d tokens, cap %d, renewal queued %v", k().phase, k().Tokens(), k().share.capTokens, k().is(bitQueued))
				}
				return nil
			}},
		{name: "t2: one sweep later, awake: asked something a sweep ago", at: 11 * time.Millisecond,
			want: func(g *rig) error {
				if k().phase != phaseSharing {
					return fmt.Errorf("phase %v", k().phase)
				}
				return nil
			}},
		{name: "t3: two sweeps after its last demand, full: asleep, out of the sweep", at: 31 * time.Millisecond,
			want: func(g *rig) error {
				if k().phase != phaseDormant || !k().is(bitAsleep) || k().low.Load() != math.MaxInt64 || g.core.sharing.has(k()) {
					return fmt.Errorf("phase %v, asleep %v, watermark %d, in the sweep %v", k().phase, k().is(bitAsleep), k().low.Load(), g.core.sharing.has(k()))
				}
				if at, ok := g.core.NextWake(); !ok || at-g.start != renewal {
					return fmt.Errorf("next wake %v (%v), want only the renewal at %v", at-g.start, ok, renewal)
				}
				return nil
			}},
		{name: "t4: a Take wakes it, and sends nothing: its renewal is queued", at: 50 * time.Millisecond,
			do: func(g *rig) {
				if v := g.decide("r", "k", 1); !v.Allowed || v.Fallback {
					t.Fatalf("the take: %+v", v)
				}
			},
			want: func(g *rig) error {
				if k().phase != phaseSharing || k().is(bitAsleep) || !g.core.sharing.has(k()) || k().low.Load() == math.MaxInt64 {
					return fmt.Errorf("phase %v, asleep %v, in the sweep %v, watermark %d", k().phase, k().is(bitAsleep), g.core.sharing.has(k()), k().low.Load())
				}
				return calls(g)
			}},
		{name: "t5: its renewal gives back all the share made but the token taken, asleep or not", at: 51 * time.Millisecond,
			do: func(g *rig) {
				g.to(renewal - time.Microsecond)
				if len(g.out) != 0 {
					t.Fatalf("renewed before its time, %v", renewal)
				}
				g.to(renewal)
			},
			want: func(g *rig) error {
				if err := calls(g, []string{"k"}); err != nil {
					return err
				}
				// 1000/s from the answer at t1, less the 1 token taken at t4.
				earned := int64((renewal-time.Millisecond)/time.Millisecond) - 1
				if r, _ := g.last("k"); r.Returned < earned-1 || r.Returned > earned || r.Held != r.Returned+k().Tokens() {
					return fmt.Errorf("renewal %+v, want %d returned and held with the %d tokens", r, earned, k().Tokens())
				}
				return nil
			}},
	})
}
