package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/clock"
)

// patience bounds how long, in real time, a test waits for a goroutine to
// park on the fake clock or to return; it is never slept.
const patience = 10 * time.Second

// queueHarness runs callers of one Queue on a fake clock and records the
// fake instant at which each is released.
type queueHarness struct {
	t     *testing.T
	clk   *clock.Fake
	q     *bucket.Queue
	done  chan result
	start time.Time
}

type result struct {
	name string
	err  error
	at   time.Duration // fake time since start when Wait returned
}

func newQueueHarness(t *testing.T, rate float64, capacity int) *queueHarness {
	t.Helper()
	clk := clock.NewFake(t0)
	q, err := bucket.NewQueue(rate, capacity, clk)
	if err != nil {
		t.Fatal(err)
	}
	return &queueHarness{t: t, clk: clk, q: q, done: make(chan result, 2000), start: t0}
}

// enter starts a caller and returns once it is in the queue, so callers
// started one after another queue in that order.
func (h *queueHarness) enter(name string, ctx context.Context) {
	h.t.Helper()
	before := h.q.Len()
	go func() {
		err := h.q.Wait(ctx)
		h.done <- result{name, err, h.clk.Now().Sub(h.start)}
	}()
	deadline := time.Now().Add(patience)
	for h.q.Len() == before {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s never entered the queue", name)
		}
		runtime.Gosched() // let the new goroutine run; no sleeping
	}
}

// through calls Wait on an idle queue, which must return at once.
func (h *queueHarness) through(name string) {
	h.t.Helper()
	if err := h.q.Wait(context.Background()); err != nil {
		h.t.Fatalf("%s: Wait on an idle queue = %v", name, err)
	}
}

// next returns the next caller to finish.
func (h *queueHarness) next() result {
	h.t.Helper()
	select {
	case r := <-h.done:
		return r
	case <-time.After(patience):
		h.t.Fatal("no caller returned")
		return result{}
	}
}

// advance moves the fake clock once the front caller is parked on its timer.
func (h *queueHarness) advance(d time.Duration) {
	h.t.Helper()
	if !h.clk.WaitTimers(1, patience) {
		h.t.Fatal("the front caller never armed its timer")
	}
	h.clk.Advance(d)
}

// expect checks that the next caller out is name, released at at.
func (h *queueHarness) expect(name string, at time.Duration) {
	h.t.Helper()
	if r := h.next(); r.name != name || r.err != nil || r.at != at {
		h.t.Fatalf("got %s released at %v (err %v), want %s at %v", r.name, r.at, r.err, name, at)
	}
}

// expectTogether checks that the next callers out are names, in any order,
// all released at at: callers released by one advance of the clock return
// concurrently, and the order their goroutines report in is the
// scheduler's, not the queue's.
func (h *queueHarness) expectTogether(names []string, at time.Duration) {
	h.t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for range names {
		if r := h.next(); !want[r.name] || r.err != nil || r.at != at {
			h.t.Fatalf("got %s released at %v (err %v), want one of %v at %v", r.name, r.at, r.err, names, at)
		} else {
			delete(want, r.name)
		}
	}
}

func TestQueueFIFOAtExactSpacing(t *testing.T) {
	h := newQueueHarness(t, 10, 5) // one release every 100 ms
	ctx := context.Background()
	h.through("a") // an idle queue lets the first caller through at once
	for _, name := range []string{"b", "c", "d", "e"} {
		h.enter(name, ctx)
	}
	if got := h.q.Len(); got != 4 {
		t.Fatalf("Len() = %d, want 4", got)
	}
	ms := time.Millisecond
	h.advance(100*ms - 1)
	if got := h.q.Len(); got != 4 || h.clk.Timers() != 1 {
		t.Fatalf("a nanosecond early: Len() = %d, timers %d; want 4 waiting on 1 timer", got, h.clk.Timers())
	}
	h.clk.Advance(1)
	h.expect("b", 100*ms)
	h.advance(100 * ms)
	h.expect("c", 200*ms)
	// A late clock releases the callers whose instants have passed, on the
	// original schedule: d's instant is 300 ms, e's 400 ms; both go at 450
	// ms (which of them reports first is the scheduler's: it failed a run).
	h.advance(250 * ms)
	h.expectTogether([]string{"d", "e"}, 450*ms)
	h.enter("f", ctx) // the schedule's next slot, 500 ms, has not come yet
	h.advance(50 * ms)
	h.expect("f", 500*ms)
}

// At 3/s, 1/rate is 333333333.3 ns: releases at ceil(k/3 s), no drift.
func TestQueueExactThirds(t *testing.T) {
	h := newQueueHarness(t, 3, 10)
	ctx := context.Background()
	h.through("0")
	for i := 1; i < 4; i++ {
		h.enter(fmt.Sprint(i), ctx)
	}
	for _, step := range []struct {
		name string
		at   time.Duration
	}{{"1", 333333334}, {"2", 666666667}, {"3", time.Second}} {
		h.advance(step.at - h.clk.Now().Sub(t0) - 1)
		if h.q.Len() == 0 || h.clk.Timers() != 1 {
			t.Fatalf("%s released a nanosecond early", step.name)
		}
		h.clk.Advance(1)
		h.expect(step.name, step.at)
	}
}

func TestQueueFullRefusesAtOnce(t *testing.T) {
	h := newQueueHarness(t, 1, 2)
	ctx := context.Background()
	h.through("a")
	h.enter("b", ctx)
	h.enter("c", ctx)
	if err := h.q.Wait(ctx); !errors.Is(err, bucket.ErrQueueFull) {
		t.Fatalf("Wait on a full queue = %v, want ErrQueueFull", err)
	}
	h.advance(time.Second)
	h.expect("b", time.Second)
	h.enter("d", ctx) // b's place is free again
	h.advance(time.Second)
	h.expect("c", 2*time.Second)
	h.advance(time.Second)
	h.expect("d", 3*time.Second)
}

func TestQueueCancelInTheMiddle(t *testing.T) {
	h := newQueueHarness(t, 1, 3)
	ctx := context.Background()
	h.through("a")
	cctx, cancel := context.WithCancel(ctx)
	h.enter("b", ctx)
	h.enter("c", cctx)
	h.enter("d", ctx)
	cancel()
	if r := h.next(); r.name != "c" || !errors.Is(r.err, context.Canceled) || r.at != 0 {
		t.Fatalf("got %+v, want c cancelled at once", r)
	}
	if got := h.q.Len(); got != 2 {
		t.Fatalf("Len() = %d after a cancellation, want 2", got)
	}
	h.enter("e", ctx) // the freed place is usable
	h.advance(time.Second)
	h.expect("b", 1*time.Second)
	h.advance(time.Second)
	h.expect("d", 2*time.Second) // no release was lost to c
	h.advance(time.Second)
	h.expect("e", 3*time.Second)
}

func TestQueueCancelAtTheFront(t *testing.T) {
	h := newQueueHarness(t, 1, 3)
	ctx := context.Background()
	h.through("a")
	bctx, cancel := context.WithCancel(ctx)
	h.enter("b", bctx)
	h.enter("c", ctx)
	if !h.clk.WaitTimers(1, patience) {
		t.Fatal("b never armed its timer")
	}
	h.clk.Advance(500 * time.Millisecond)
	cancel()
	if r := h.next(); r.name != "b" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("got %+v, want b cancelled", r)
	}
	// c takes over b's release instant, 1 s, rather than starting afresh.
	h.advance(500 * time.Millisecond)
	h.expect("c", time.Second)
	if got := h.q.Len(); got != 0 {
		t.Fatalf("Len() = %d, want 0", got)
	}
}

func TestQueueDeadlineAndDoneContext(t *testing.T) {
	h := newQueueHarness(t, 1, 3)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.q.Wait(done); !errors.Is(err, context.Canceled) || h.q.Len() != 0 {
		t.Fatalf("Wait(done ctx) = %v with Len %d, want Canceled and nothing queued", err, h.q.Len())
	}
	h.through("a")
	// A deadline is real time, not fake: it ends while the fake clock stands.
	short, stop := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer stop()
	h.enter("b", short)
	if r := h.next(); r.name != "b" || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("got %+v, want b past its deadline", r)
	}
	if h.q.Len() != 0 || h.clk.Timers() != 0 {
		t.Fatalf("after b left: Len %d, timers %d; want 0, 0", h.q.Len(), h.clk.Timers())
	}
}

func TestNewQueueNamesTheField(t *testing.T) {
	clk := clock.NewFake(t0)
	for _, c := range []struct {
		rate     float64
		capacity int
		clk      clock.Clock
		want     string
	}{
		{0, 1, clk, "bucket: queue: rate must be positive"},
		{-1, 1, clk, "bucket: queue: rate must be positive"},
		{1e-300, 1, clk, "bucket: queue: rate 1e-300 per second is out of range"},
		{1, 0, clk, "bucket: queue: capacity must be positive"},
		{1, 1, nil, "bucket: queue: clock must not be nil"},
	} {
		_, err := bucket.NewQueue(c.rate, c.capacity, c.clk)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewQueue(%v, %d, %v) error %v, want %q", c.rate, c.capacity, c.clk, err, c.want)
		}
	}
}

func deadline() <-chan time.Time { return time.After(patience) }
