package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// The clock-step tests: a store's clock that steps back across a window
// boundary (a Redis failover to a replica whose clock is behind) must not
// reopen a window. Before the fix a fixed window of 10/s admitted 30 in one
// window and a sliding window 21.

const (
	stepPeriod = time.Second
	stepBack   = 100 * time.Millisecond
	// stepProbe is the resolution at which toBoundary finds a window's start.
	stepProbe = 10 * time.Millisecond
)

// toBoundary advances the clock until a window of r starts, and leaves it at
// most stepProbe past that start. The suite cannot read a store's clock; a
// lease's epoch tells which window the store is in.
func toBoundary(t *testing.T, h Harness, s store.Store, r *rules.Rule) {
	t.Helper()
	first := acquire(t, s, r, "probe", "n", 0, 0).Epoch
	for range int(2 * stepPeriod / stepProbe) {
		h.Advance(t, stepProbe)
		if acquire(t, s, r, "probe", "n", 0, 0).Epoch != first {
			return
		}
	}
	t.Fatalf("the window never rolled over two periods of %v", stepPeriod)
}

// admitted is what one check of cost and one lease of want admit.
func admitted(t *testing.T, s store.Store, r *rules.Rule, cost, want int64) int64 {
	t.Helper()
	n := acquire(t, s, r, "k", "n", want, 0).Granted
	if check(t, s, r, "k", cost).Allowed {
		n += cost
	}
	return n
}

func testFixedWindowStepBack(t *testing.T, h Harness) {
	if h.StepBack == nil {
		t.Skip("the store's clock cannot step back")
	}
	s := h.New(t)
	r := windowRule(t, rules.FixedWindow, 10, stepPeriod)
	toBoundary(t, h, s, r)
	h.Advance(t, stepPeriod-stepBack+stepProbe/2) // late in window w
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("10 of 10 in window w refused: %+v", d)
	}
	h.Advance(t, stepBack) // early in window w+1
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("10 of 10 in window w+1 refused: %+v", d)
	}
	h.StepBack(t, stepBack) // back in window w by the clock
	if n := admitted(t, s, r, 1, 10); n != 0 {
		t.Fatalf("after the clock stepped back %v into the previous window, %d more admitted: window w+1 got %d of its limit 10",
			stepBack, n, 10+n)
	}
	h.Advance(t, stepBack) // window w+1 again
	if n := admitted(t, s, r, 1, 10); n != 0 {
		t.Fatalf("when the clock came back to window w+1, %d more admitted: it got %d of its limit 10", n, 10+n)
	}
	// Window w+2: the window is not stuck (once n, which held a lease in
	// w+1, is gone: absent, its fallback would be reserved).
	leave(t, s, r, "k", "n")
	h.Advance(t, stepPeriod)
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("10 of 10 in window w+2 refused: %+v", d)
	}
}

func testSlidingWindowStepBack(t *testing.T, h Harness) {
	if h.StepBack == nil {
		t.Skip("the store's clock cannot step back")
	}
	s := h.New(t)
	r := windowRule(t, rules.SlidingWindow, 10, stepPeriod)
	toBoundary(t, h, s, r)
	h.Advance(t, stepPeriod/2)
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("10 of 10 refused: %+v", d)
	}
	// Early in the next window the previous one still weighs about 9.5.
	h.Advance(t, stepPeriod/2+stepBack/2)
	if n := admitted(t, s, r, 1, 10); n != 0 {
		t.Fatalf("%d admitted just after a full window", n)
	}
	h.StepBack(t, stepBack) // back in the full window by the clock
	if n := admitted(t, s, r, 1, 10); n != 0 {
		t.Fatalf("after the clock stepped back %v into the previous window, %d more admitted within one period of 10",
			stepBack, n)
	}
	h.Advance(t, stepBack)
	if n := admitted(t, s, r, 1, 10); n != 0 {
		t.Fatalf("when the clock came forward again, %d more admitted within one period of 10", n)
	}
	// Two windows on, nothing weighs: not stuck (once n is gone, as above).
	leave(t, s, r, "k", "n")
	h.Advance(t, 2*stepPeriod)
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("10 of 10 two windows later refused: %+v", d)
	}
}

// testSlidingLogStepBack: an entry logged after the clock stepped back is
// stamped no earlier than the newest entry, so that it does not leave the
// log early. Before, five entries stamped 100ms after the first (of ten per
// second) let six more in at 1.15s, when only five had left.
func testSlidingLogStepBack(t *testing.T, h Harness) {
	if h.StepBack == nil {
		t.Skip("the store's clock cannot step back")
	}
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "sl", Algorithm: rules.SlidingLog, Limit: 10, Period: stepPeriod})
	for i, st := range []struct {
		advance, back time.Duration
		cost          int64
	}{
		{0, 0, 5},                       // 5 at 0
		{900 * time.Millisecond, 0, 3},  // 3 at 900ms
		{0, 800 * time.Millisecond, 2},  // 2 at 100ms by the clock: stamped 900ms
		{1050 * time.Millisecond, 0, 5}, // at 1.15s the 5 of 0 have left, the others not
	} {
		h.Advance(t, st.advance)
		if st.back > 0 {
			h.StepBack(t, st.back)
		}
		if i == 3 {
			if d := check(t, s, r, "k", 6); d.Allowed {
				t.Fatalf("6 admitted at 1.15s: the 2 logged after the clock stepped back left early: %+v", d)
			}
		}
		if d := check(t, s, r, "k", st.cost); !d.Allowed {
			t.Fatalf("step %d: %d of the log's room refused: %+v", i, st.cost, d)
		}
	}
}

// A window whose period changes on reload starts afresh. Before, a period
// grown from 1s to 1h kept the index of a 1s window, a million windows
// ahead of any 1h index: the window never ended and kept its count.
func testWindowPeriodChange(t *testing.T, h Harness) {
	s := h.New(t)
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		short := windowRule(t, alg, 10, time.Second)
		if d := check(t, s, short, "k", 10); !d.Allowed {
			t.Fatalf("%s: %+v", alg, d)
		}
		long := *short
		long.Period = time.Hour
		if err := long.Normalize(); err != nil {
			t.Fatal(err)
		}
		if d := check(t, s, &long, "k", 10); !d.Allowed {
			t.Fatalf("%s: after the period grew to 1h: %+v, want a fresh window", alg, d)
		}
	}
}
