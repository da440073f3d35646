package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
)

// Window rules: where the store's windows lie on the node's clock, as the
// window grants tell (Core.Windows), and the fallback of a window key,
// which admits nothing in a window it held a lease in (docs/bounds.md,
// rule 5). The rig's store clock is its wall clock, which starts on a
// whole 10 s: the store reads the node's monotonic clock plus d, the
// wall clock's start.

// A window grant narrows where the store's windows lie: the store applied
// the request between its send and its answer, and a lease its window's
// end cut short ends exactly there. Before any, Windows is the node's own
// guess, not known.
func TestWindowGrantTeachesWhereTheStoresWindowsLie(t *testing.T) {
	g := newRig(t, nil)
	d := time.Duration(g.clk.Now().UnixNano()) - g.now()
	g.run([]step{
		{name: "t0: nothing learned: the guess, unknown", at: 0,
			do: func(g *rig) { g.decide("win", "k", 1) },
			want: func(g *rig) error {
				if w := g.core.Windows(d + time.Second); w != (fallback.Windows{Lo: d + time.Second, Hi: d + time.Second}) {
					return fmt.Errorf("windows %+v before any grant", w)
				}
				return nil
			}},
		{name: "t1: a token bucket's grant teaches nothing", at: time.Millisecond,
			do: func(g *rig) {
				g.decide("r", "b", 1)
				g.answerCall(1)
			},
			want: func(g *rig) error {
				if err := calls(g, []string{"k"}); err != nil {
					return err
				}
				if w := g.core.Windows(0); w.Known {
					return fmt.Errorf("windows %+v", w)
				}
				return nil
			}},
		{name: "t2: the window grant, answered 2 ms after it left: d within those 2 ms", at: 2 * time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				w := g.core.Windows(0)
				if !w.Known || w.Lo > d || w.Hi < d || w.Hi-w.Lo > 2*time.Millisecond {
					return fmt.Errorf("windows %+v, want known, around %v within 2 ms", w, d)
				}
				return nil
			}},
		{name: "t3: a lease of win10 its window does not cut short says less: the estimate keeps its narrow part", at: 3 * time.Millisecond,
			do: func(g *rig) {
				g.decide("win10", "k", 1)
				g.to(4 * time.Millisecond)
				g.answer()
			},
			want: func(g *rig) error {
				w := g.core.Windows(0)
				if !w.Known || w.Lo > d || w.Hi < d || w.Hi-w.Lo > 2*time.Millisecond {
					return fmt.Errorf("windows %+v, want known, around %v within 2 ms", w, d)
				}
				return nil
			}},
	})
}

// A window key whose lease ends while the allocator is down admits nothing
// on its fallback until the window after the one it held a lease in,
// then its part of the window, l/N; a key it never held admits at once.
// (Rule win10: 100 per 10 s window, a lease TTL of 1 s: k's lease ends
// 9 s before its window does. The windows are learned from a grant of
// win, first.)
func TestWindowKeyAdmitsNothingInTheWindowItHeldALeaseIn(t *testing.T) {
	g := newRig(t, nil)
	g.nodes = 2
	k := func() *KeyLease { return g.key("win10", "k") }
	var v Verdict
	g.run([]step{
		{name: "t0: w of win and k of win10 ask", at: 0,
			do: func(g *rig) { g.decide("win", "w", 1); g.decide("win10", "k", 1) }},
		{name: "t1: answered: the windows known, k served until 1.001 s", at: time.Millisecond,
			do: func(g *rig) { g.answer() },
			want: func(g *rig) error {
				if !g.core.Windows(0).Known || k().Tokens() == 0 {
					return fmt.Errorf("windows %+v, k holds %d", g.core.Windows(0), k().Tokens())
				}
				return nil
			}},
		{name: "t2: another call fails: down", at: 2 * time.Millisecond,
			do: func(g *rig) { g.decide("win10", "o", 1); g.fail() },
			want: func(g *rig) error {
				if !g.core.Down() {
					return fmt.Errorf("not down")
				}
				return nil
			}},
		{name: "t3: k spends its lease; its refill hangs", at: 400 * time.Millisecond,
			do:   func(g *rig) { v = spend(g, "win10", "k") },
			want: func(g *rig) error { return verdict(v, false, false, false) }},
		{name: "t4: its lease may still hold at the store: refused, no fallback", at: 900 * time.Millisecond,
			do:   func(g *rig) { v = g.decide("win10", "k", 1) },
			want: func(g *rig) error { return verdict(v, false, false, false) }},
		{name: "t5: past it, still in its window: its allowance admits nothing until the next", at: 1500 * time.Millisecond,
			do: func(g *rig) { v = g.decide("win10", "k", 1) },
			want: func(g *rig) error {
				if err := verdict(v, false, true, false); err != nil {
					return err
				}
				if v.RetryAfter != 8500*time.Millisecond {
					return fmt.Errorf("retry after %v, want the next window's start, 8.5 s on", v.RetryAfter)
				}
				return nil
			}},
		{name: "t5: a key it never held admits its part of this window at once", at: 1500 * time.Millisecond,
			do: func(g *rig) {
				for range 50 {
					if v = g.decide("win10", "n", 1); !v.Allowed || !v.Fallback {
						t.Fatalf("n refused within its 50: %+v", v)
					}
				}
				v = g.decide("win10", "n", 1)
			},
			want: func(g *rig) error { return verdict(v, false, true, false) }},
		{name: "t6: the next window: k admits its 50 of it", at: 10 * time.Second,
			do: func(g *rig) {
				for range 50 {
					if v = g.decide("win10", "k", 1); !v.Allowed || !v.Fallback {
						t.Fatalf("k refused within its 50: %+v", v)
					}
				}
				v = g.decide("win10", "k", 1)
			},
			want: func(g *rig) error { return verdict(v, false, true, false) }},
	})
}

// Before any grant, the windows a fallback counts in are the node's first
// guess, kept: a step of its wall clock (the next guess) moves nothing,
// or a sliding log's fallback would count a fresh half-window mid-period
// (the simulator, seed 2491: a node clock stepped 31 minutes, 101 of 100).
func TestWindowsGuessIsKept(t *testing.T) {
	g := newRig(t, nil)
	first := g.core.Windows(5 * time.Second)
	if w := g.core.Windows(5*time.Second + 31*time.Minute); w != first || w.Lo != 5*time.Second {
		t.Fatalf("windows %+v after the wall clock stepped, want the first guess %+v", w, first)
	}
}

// Two window grants whose samples only overlap do not narrow each other:
// the store's clock may have stepped between them, and their overlap may
// then hold neither; the later sample stands. One that holds the earlier
// estimate leaves it as it was, and a narrower one inside it replaces it.
// (Rule win: 100 per 1 s window, a 2 s TTL; each grant, of 50 ms, is cut
// short by its window's end, so the store's clock reads mono + d with d in
// [end − TTL − answer, end − TTL − sent].)
func TestWindowSamplesThatOnlyOverlapDoNotNarrow(t *testing.T) {
	g := newRig(t, nil)
	r := g.table("win").Rule()
	const ms = time.Millisecond
	sample := func(epoch int64, sent, answer time.Duration) {
		f := &flight{sent: monoAt(sent)}
		g.core.learnWindows(r, f, Grant{Epoch: epoch, TTL: 50 * ms}, monoAt(answer))
	}
	// end − TTL = 10 s − 50 ms = 9.95 s for epoch 9.
	steps := []struct {
		name         string
		epoch        int64
		sent, answer time.Duration
		lo, hi       time.Duration
	}{
		{"t0: learned: d in [9.94 s, 9.95 s]", 9, 0, 10 * ms, 9940 * ms, 9950 * ms},
		{"t1: a wider sample that holds it: kept", 9, 0, 20 * ms, 9940 * ms, 9950 * ms},
		{"t2: a narrower one inside it: taken", 9, 2 * ms, 8 * ms, 9942 * ms, 9948 * ms},
		{"t3: the store's clock stepped: a wider sample that only overlaps stands alone, not the overlap",
			9, 5 * ms, 30 * ms, 9920 * ms, 9945 * ms},
	}
	for _, s := range steps {
		sample(s.epoch, s.sent, s.answer)
		if w := g.core.Windows(0); !w.Known || w.Lo != s.lo || w.Hi != s.hi {
			t.Fatalf("%s: windows [%v, %v], want [%v, %v]", s.name, w.Lo, w.Hi, s.lo, s.hi)
		}
	}
}

// A window key whose request the store may have applied, its answer lost,
// admits nothing on its fallback in the window the request may have been
// applied in: the store counts the node present there and lends the rest
// of the window to the others; the key falls back from the next window.
// (Rule win: 100 per 1 s window; store windows of 1 s on the node's
// clock.)
func TestWindowKeyAdmitsNothingInTheWindowItsLostRequestMayBeIn(t *testing.T) {
	g := newRig(t, nil)
	g.nodes = 2
	var v Verdict
	g.run([]step{
		{name: "t0: k asks, answered: the windows known, k's lease ends with window 0", at: 0,
			do: func(g *rig) {
				g.decide("win", "k", 1)
				if err := untilOut(g, time.Millisecond, 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				g.answer()
			},
			want: func(g *rig) error {
				if !g.core.Windows(0).Known || g.key("win", "k").served.Load() == 0 {
					return fmt.Errorf("windows %+v, k served %v", g.core.Windows(0), g.key("win", "k").served.Load())
				}
				return nil
			}},
		{name: "t1: window 1: k asks; the store applies it, the answer is lost", at: 1200 * time.Millisecond,
			do: func(g *rig) {
				spend(g, "win", "k")
				if err := untilOut(g, time.Millisecond, 1300*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				g.lose()
			},
			want: func(g *rig) error {
				if !g.core.Down() {
					return fmt.Errorf("not down")
				}
				return nil
			}},
		{name: "t2: no fallback in window 1, which its lost request may hold a lease in", at: 1500 * time.Millisecond,
			do: func(g *rig) { v = g.decide("win", "k", 1) },
			want: func(g *rig) error {
				if err := verdict(v, false, true, false); err != nil {
					return err
				}
				if v.RetryAfter != 500*time.Millisecond {
					return fmt.Errorf("retry after %v, want the next window's start, 500 ms on", v.RetryAfter)
				}
				return nil
			}},
		{name: "t3: window 2: its part of it", at: 2 * time.Second,
			do:   func(g *rig) { v = g.decide("win", "k", 1) },
			want: func(g *rig) error { return verdict(v, true, true, false) }},
	})
}

// A window key's report that joins what a closed allowance owes to what
// the open one admitted is dated by its newest part: the store drops a
// report that began in a window that has ended, and would drop this
// window's admissions with the older ones. A token bucket's is dated by
// its oldest, which bounds what the store debits.
func TestMixedReportIsDatedByItsNewestPartForAWindow(t *testing.T) {
	for _, tc := range []struct {
		rule string
		age  time.Duration
	}{{"win", 300 * time.Millisecond}, {"r", 1200 * time.Millisecond}} {
		g := newRig(t, nil)
		k := g.key(tc.rule, "k")
		now := monoAt(1500 * time.Millisecond)
		k.owe(10, monoAt(300*time.Millisecond))
		a := fallback.NewAllowance()
		a.RestoreConsumed(5, 1200*time.Millisecond)
		k.fallback.Store(a)
		if n, age := k.takeConsumed(now); n != 15 || age != tc.age {
			t.Errorf("%s: report of %d aged %v, want 15 aged %v", tc.rule, n, age, tc.age)
		}
	}
}
