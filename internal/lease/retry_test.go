package lease

import (
	"fmt"
	"testing"
	"time"
)

// Requests whose answers did not come back: sent again as they were, with
// their sequence numbers, while the allocator may answer them again (a TTL
// after it applied them), and dropped once they are older than half a TTL,
// their report made afresh.

// untilOut moves the clock on by step until a call is out, at most until
// limit after the rig's start.
func untilOut(g *rig, step, limit time.Duration) error {
	for len(g.out) == 0 {
		at := g.now() - g.start + step
		if at > limit {
			return fmt.Errorf("no call out by %v", limit)
		}
		g.to(at)
	}
	return nil
}

// A request the store applied but whose answer was lost is sent again
// with its sequence number, and the store answers it again without
// applying it twice: the same grant, the bucket debited once.
func TestLostAnswerIsSentAgainAndAppliedOnce(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	k := func() *KeyLease { return g.key("api", "a") }
	var lost Request
	var applied Answer
	var before int64
	g.run([]step{
		{name: "t0: a's first request, for the 50 its caller waits on", at: 0,
			do: func(g *rig) { g.decide("api", "a", 50) }},
		{name: "t1: answered", at: time.Millisecond, do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if n := k().Tokens(); n != 50 {
					return fmt.Errorf("holds %d, want 50", n)
				}
				return nil
			}},
		{name: "t2: a runs low: its refill leaves", at: 10 * time.Millisecond,
			do: func(g *rig) {
				g.decide("api", "a", 49)
				g.to(11 * time.Millisecond)
			},
			want: func(g *rig) error {
				var err error
				lost, err = g.last("a")
				if len(g.out) != 1 || err != nil || lost.Want == 0 {
					return fmt.Errorf("calls out %v, refill %+v (%v)", g.callKeys(), lost, err)
				}
				before = k().Tokens()
				return nil
			}},
		{name: "t3: the store applies it and its answer is lost", at: 12 * time.Millisecond,
			do: func(g *rig) { applied = g.lose()[0] },
			want: func(g *rig) error {
				if !g.core.Down() {
					return fmt.Errorf("a lost answer does not count the allocator down")
				}
				if applied.Grants[0].Granted == 0 {
					return fmt.Errorf("the store granted nothing of %d", lost.Want)
				}
				return nil
			}},
		{name: "t4: after the backoff the same request leaves again", at: 13 * time.Millisecond,
			want: func(g *rig) error {
				if err := untilOut(g, 5*time.Millisecond, 200*time.Millisecond); err != nil {
					return err
				}
				again, _ := g.last("a")
				if !again.OnFallback {
					return fmt.Errorf("sent again while the allocator is down: %+v, want it on the fallback", again)
				}
				if again.OnFallback = lost.OnFallback; again != lost {
					return fmt.Errorf("sent again as %+v, want %+v (on the fallback now)", again, lost)
				}
				return nil
			}},
		{name: "t5: the store answers it again: the same grant, nothing applied twice", at: 150 * time.Millisecond,
			do: func(g *rig) {
				c := g.out[0]
				g.out = nil
				replay, err := g.apply(c)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := replay.Grants[0], applied.Grants[0]; got.Granted != want.Granted || got.Remaining != want.Remaining {
					t.Fatalf("replayed %+v, want the lost answer's %+v", got, want)
				}
				g.core.Answer(c, replay, nil, time.Millisecond, g.now())
				g.turn()
			},
			want: func(g *rig) error {
				if g.core.Down() {
					return fmt.Errorf("still down after an answer")
				}
				if got, want := k().Tokens(), before+applied.Grants[0].Granted; got != want {
					return fmt.Errorf("holds %d, want %d: the grant once", got, want)
				}
				// Another node sees the bucket debited once (it refilled a
				// little since: 1000/min).
				if rem := g.acquireAs("n2", "api", "a", 0, 0).Remaining; rem < applied.Grants[0].Remaining {
					return fmt.Errorf("the bucket holds %d, below the %d left after the first apply", rem, applied.Grants[0].Remaining)
				}
				return nil
			}},
	})
}

// A request left unanswered for half a TTL is not sent again: the
// allocator may have forgotten it. A new one (a new sequence number)
// reports its consumption afresh, with what was admitted since, dated
// from the first of it: at worst debited twice, never lost.
func TestOldUnansweredRequestIsDroppedAndItsConsumptionReportedAfresh(t *testing.T) {
	g := newRig(t, func(c *Config) { c.TokensOnly = true })
	var first Request
	var v Verdict
	var firstAt, sentAt time.Duration
	g.run([]step{
		{name: "t0: another key's call fails: the allocator is down", at: 0,
			do: func(g *rig) { g.decide("r", "o", 1); g.fail() }},
		{name: "t1: a new key admits 5 on its fallback", at: time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "a", 5) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t2: its report leaves after the backoff, and fails", at: 2 * time.Millisecond,
			do: func(g *rig) {
				if err := untilOut(g, 5*time.Millisecond, 200*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				first, _ = g.last("a")
				firstAt = g.now() - g.start
				g.fail()
			},
			want: func(g *rig) error {
				if first.Consumed != 5 || first.Seq == 0 {
					return fmt.Errorf("report %+v, want 5 consumed", first)
				}
				return nil
			}},
		{name: "t3: 3 more admitted while it waits to be sent again", at: 200 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("r", "a", 3) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
		{name: "t4: sent again as it was until half a TTL after it first left", at: 201 * time.Millisecond,
			do: func(g *rig) {
				for {
					if err := untilOut(g, 5*time.Millisecond, 2*time.Second); err != nil {
						t.Fatal(err)
					}
					if r, _ := g.last("a"); r.Seq != first.Seq {
						sentAt = g.now() - g.start
						return
					}
					g.fail()
				}
			},
			want: func(g *rig) error {
				reqs := g.requests("a")
				if len(reqs) < 3 {
					return fmt.Errorf("%d requests of a, want it sent again before it was dropped", len(reqs))
				}
				for _, r := range reqs[:len(reqs)-1] {
					if r.OnFallback = first.OnFallback; r != first {
						return fmt.Errorf("a retry %+v differs from the request %+v", r, first)
					}
				}
				return nil
			}},
		{name: "t5: then a new request: a new number, all 8 reported, dated from the first", at: time.Second,
			want: func(g *rig) error {
				r, _ := g.last("a")
				if sentAt < firstAt+500*time.Millisecond {
					return fmt.Errorf("dropped at %v, before half a TTL after %v", sentAt, firstAt)
				}
				if r.Seq == first.Seq || r.Consumed != 8 {
					return fmt.Errorf("new request %+v, want a new seq and 8 consumed", r)
				}
				if want := sentAt - time.Millisecond; r.ConsumedAge != want {
					return fmt.Errorf("consumed age %v, want %v (since t1)", r.ConsumedAge, want)
				}
				return nil
			}},
		{name: "t6: answered: nothing left to report", at: time.Second,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if k := g.key("r", "a"); k.owes() || k.req.unacked != nil {
					return fmt.Errorf("owes %d, unacked %v", k.req.owed, k.req.unacked)
				}
				return nil
			}},
	})
}
