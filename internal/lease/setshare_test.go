package lease

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A share that shrinks at its renewal was earned twice over the round trip
// (the key at its old rate, the allocator lending the new one from when it
// answered): of that difference the key owes only what the share put in
// its tokens meanwhile (pooled), which it may have admitted; what
// overflowed its cap nobody admitted, and is dropped rather than given
// back (setShare). (Rule r: k holds the whole 1000/s until n2 asks for all
// of it too; the renewal's answer, 100 ms later, halves k's share.)
func TestShrinkingShareOwesOnlyWhatItPooledInFlight(t *testing.T) {
	g := newRig(t, func(c *Config) { c.RoundTrip = func() time.Duration { return 60 * time.Millisecond } })
	k := func() *KeyLease { return g.key("r", "k") }
	var renewal time.Duration
	var tokens, pooled, overflow int64
	g.run([]step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.decide("r", "k", 1) }},
		{name: "t1: answered: the whole rate, its renewal queued", at: time.Millisecond,
			do: func(g *rig) {
				g.answer()
				renewal = mono(k().notBefore.Load()).sinceOrigin() - g.start
			},
			want: func(g *rig) error {
				if k().shareRate() != 1000 || renewal < 80*time.Millisecond || renewal > 100*time.Millisecond {
					return fmt.Errorf("share %v, renewal at %v", k().shareRate(), renewal)
				}
				return nil
			}},
		{name: "t2: busy, 5 every 10 ms; n2 asks for the whole rate at 50 ms and gets none yet", at: 10 * time.Millisecond,
			do: func(g *rig) {
				for at := 10 * time.Millisecond; at < renewal; at += 10 * time.Millisecond {
					g.to(at)
					g.decide("r", "k", 5)
					if at == 50*time.Millisecond {
						if got := g.acquireAs("n2", "r", "k", 0, 1000); got.Rate != 0 || got.Holders != 2 {
							t.Fatalf("n2 granted %+v", got)
						}
					}
				}
			}},
		// (The steps from here go by the renewal's instant, drawn over
		// 80-100 ms: each step's at is the earliest it may be.)
		{name: "t3: the renewal leaves, asking to keep its share", at: 80 * time.Millisecond,
			do: func(g *rig) {
				g.to(renewal - time.Microsecond)
				g.decide("r", "k", 5)
				g.to(renewal)
			},
			want: func(g *rig) error {
				if err := calls(g, []string{"k"}); err != nil {
					return err
				}
				if r, _ := g.last("k"); r.WantRate < 900 {
					return fmt.Errorf("renewal %+v", r)
				}
				return nil
			}},
		{name: "t4: 30 spent in flight, and earned again into the tokens", at: 81 * time.Millisecond,
			do: func(g *rig) {
				g.to(renewal + time.Millisecond)
				g.decide("r", "k", 30)
				for at := renewal + 10*time.Millisecond; at <= renewal+100*time.Millisecond; at += 10 * time.Millisecond {
					g.to(at)
				}
				s := k().share
				tokens, pooled, overflow = k().Tokens(), s.pooled, s.overflow
			},
			want: func(g *rig) error {
				if pooled < 30 || tokens != k().share.capTokens {
					return fmt.Errorf("pooled %d, %d tokens", pooled, tokens)
				}
				return nil
			}},
		{name: "t5: answered 100 ms after it left: half the rate; it owes what it pooled, not the whole overlap", at: 180 * time.Millisecond,
			do: func(g *rig) { g.through(renewal + 100*time.Millisecond); g.answer() },
			want: func(g *rig) error {
				if k().shareRate() != 500 {
					return fmt.Errorf("share %v, want 500", k().shareRate())
				}
				twice := (1000.0 - 500) * (g.now() - g.start - renewal).Seconds()
				if twice <= float64(pooled) {
					return fmt.Errorf("the overlap (%.1f) is within what was pooled (%d): nothing shown", twice, pooled)
				}
				if got, want := k().Tokens(), tokens-pooled; got != want {
					return fmt.Errorf("holds %d, want %d: %d less what it pooled, %d (the whole overlap: %.1f)", got, want, tokens, pooled, twice)
				}
				// (What is left of the overflow may have left already, given
				// back by the request the answer sent: the key is quiet.)
				left := k().share.overflow
				if r, err := g.last("k"); err == nil && len(g.out) > 0 {
					left += r.Returned
				}
				if got, want := left, overflow-int64(math.Floor(twice-float64(pooled))); got != want {
					return fmt.Errorf("overflow %d, want %d: the overlap's rest dropped from %d", got, want, overflow)
				}
				return nil
			}},
	})
}

// A share that ends or shrinks gives back with the key's next request
// what its pool piled up past the new share's pool and the rule's burst:
// past the burst, a pool is the tenth of the rate the bound allows the
// shares, and the holders the rate goes to fill theirs anew. (Rule narrow:
// 5000/s, a burst of 50, a pool of 500 at the whole rate.)
func TestEndingShareGivesBackItsPoolPastTheBurst(t *testing.T) {
	g := newRig(t, nil)
	k := func() *KeyLease { return g.key("narrow", "k") }
	var answered time.Duration
	g.run([]step{
		{name: "t0: k's first request", at: 0, do: func(g *rig) { g.decide("narrow", "k", 1) }},
		{name: "t1: answered: the burst and the whole rate", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k().shareRate() != 5000 || k().share.capTokens != 500 {
					return fmt.Errorf("share %v, pool %d", k().shareRate(), k().share.capTokens)
				}
				return nil
			}},
		{name: "t2: quiet: its pool fills", at: 150 * time.Millisecond,
			do: func(g *rig) {
				for at := 10 * time.Millisecond; at <= 150*time.Millisecond; at += 10 * time.Millisecond {
					g.to(at)
				}
			},
			want: func(g *rig) error {
				if k().Tokens() != 500 {
					return fmt.Errorf("%d tokens, want its pool of 500", k().Tokens())
				}
				return nil
			}},
		{name: "t3: its renewal, quiet, gives the share back; the answer ends it, and the key held more until then", at: 300 * time.Millisecond,
			do: func(g *rig) {
				for at := 160 * time.Millisecond; at <= 300*time.Millisecond && len(g.out) == 0; at += 10 * time.Millisecond {
					g.to(at)
				}
				if len(g.out) == 0 {
					t.Fatalf("no renewal by 300 ms")
				}
				before := k().share.overflow
				g.answer()
				if k().shareRate() != 0 {
					t.Fatalf("share %v after giving it back", k().shareRate())
				}
				// The pool of 500 past the burst of 50 goes to be given back,
				// but for the token the round trip's overlap owes (paid from
				// the tokens); of what had overflowed before, the overlap
				// drops what it earned twice.
				if after := k().share.overflow; after < 449 || after > before+449 {
					t.Fatalf("%d to be given back (%d before), want the 449 past the burst and the token owed", after, before)
				}
			},
			want: func(g *rig) error {
				if k().Tokens() != 50 {
					return fmt.Errorf("%d tokens, want the burst of 50 kept", k().Tokens())
				}
				answered = g.now()
				if k().req.spentAt != monoAt(answered) {
					return fmt.Errorf("the key notes it held less from %v, want from the answer at %v", k().req.spentAt.sinceOrigin()-g.start, answered-g.start)
				}
				return nil
			}},
	})
}
