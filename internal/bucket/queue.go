package bucket

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/clock"
)

// ErrQueueFull is returned by Queue.Wait, at once, when capacity callers are
// already waiting.
var ErrQueueFull = errors.New("bucket: queue is full")

// Queue is the leaky bucket as a queue, not a meter: callers wait in a
// bounded FIFO and are released one every 1/rate, so the output is smooth
// however bursty the input. A full queue turns callers away with
// ErrQueueFull instead of letting the wait grow without bound.
//
// Release instants follow an exact schedule: each caller leaves at the later
// of its arrival and the previous release plus 1/rate, kept as a fraction of
// a nanosecond where 1/rate is not whole (at 3/s: 0, 333333334, 666666667,
// 1000000000 ns, rounded up to the nanosecond, never drifting). Releases go
// by the schedule, not by when a goroutine happens to run: if the clock
// jumps, or the front caller wakes late, the callers whose instants have
// passed leave at once, in order, and the pace resumes from the schedule.
//
// Only the caller at the front watches the clock, on one timer. A caller
// that gives up (its context ends) leaves the list; if it was at the front,
// the next caller takes over the same release instant, so no release is
// lost, later callers keep their pace, and the freed place is open at once.
//
// A Queue is safe for concurrent use.
type Queue struct {
	clk      clock.Clock
	capacity int
	step     time.Duration // whole nanoseconds of 1/rate
	stepFrac int64         // the rest of 1/rate, in units of 1/unit ns
	unit     int64         // denominator of the fractions, rate.tokens

	mu       sync.Mutex
	waiting  list.List // of *waiter, oldest first
	next     time.Time // earliest instant the next release may happen...
	nextFrac int64     // ...plus nextFrac/unit ns
}

// waiter is one caller in the queue.
type waiter struct {
	arrived time.Time
	front   chan struct{} // closed when the waiter reaches the front
	elem    *list.Element
}

// NewQueue returns an empty queue that releases rate callers per second and
// lets at most capacity wait. The clock times the waits; tests pass a Fake.
func NewQueue(rate float64, capacity int, clk clock.Clock) (*Queue, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("bucket: queue: rate must be positive and finite, got %v", rate)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("bucket: queue: capacity must be positive, got %d", capacity)
	}
	if clk == nil {
		return nil, errors.New("bucket: queue: clock must not be nil")
	}
	r, ok := rateFromFloat(rate)
	if !ok {
		return nil, fmt.Errorf("bucket: queue: rate %v per second is out of range", rate)
	}
	// 1/rate = r.per/r.tokens nanoseconds.
	return &Queue{
		clk:      clk,
		capacity: capacity,
		step:     time.Duration(r.per / r.tokens),
		stepFrac: r.per % r.tokens,
		unit:     r.tokens,
	}, nil
}

// Len reports how many callers are waiting, the one at the front included.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting.Len()
}

// Wait blocks until it is the caller's turn and returns nil. It returns
// ErrQueueFull at once if capacity callers are waiting, and ctx.Err() if ctx
// ends first, in which case the caller has left the queue and its turn goes
// to the next in line.
func (q *Queue) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := q.enqueue()
	if err != nil {
		return err
	}
	select {
	case <-w.front:
		return q.lead(ctx, w)
	case <-ctx.Done():
		return q.leave(w, ctx.Err())
	}
}

func (q *Queue) enqueue() (*waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting.Len() >= q.capacity {
		return nil, ErrQueueFull
	}
	w := &waiter{arrived: q.clk.Now(), front: make(chan struct{})}
	w.elem = q.waiting.PushBack(w)
	if q.waiting.Len() == 1 {
		close(w.front)
	}
	return w, nil
}

// lead runs while w is at the front: it waits on the clock for w's release
// instant. The loop re-checks after each wake-up, since a real clock may
// wake a timer early relative to the wall time the schedule uses.
func (q *Queue) lead(ctx context.Context, w *waiter) error {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return q.leave(w, err)
		}
		wait := q.release(w)
		if wait <= 0 {
			return nil
		}
		if timer == nil {
			timer = q.clk.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C():
		case <-ctx.Done():
		}
	}
}

// release lets w, at the front, go if its instant has come, advancing the
// schedule and handing the front to the next caller; otherwise it reports
// how long is left.
func (q *Queue) release(w *waiter) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	at, frac := q.releaseInstant(w)
	due := at
	if frac > 0 {
		due = due.Add(time.Nanosecond) // the first whole nanosecond not before it
	}
	if wait := due.Sub(q.clk.Now()); wait > 0 {
		return wait
	}
	q.next, q.nextFrac = at.Add(q.step), frac+q.stepFrac
	if q.nextFrac >= q.unit {
		q.next, q.nextFrac = q.next.Add(time.Nanosecond), q.nextFrac-q.unit
	}
	q.removeLocked(w)
	return 0
}

// releaseInstant is the later of the scheduled next release and w's
// arrival: a caller into an idle queue goes at once, and one behind others
// goes one step after them, however late its goroutine gets to run.
func (q *Queue) releaseInstant(w *waiter) (time.Time, int64) {
	if q.next.After(w.arrived) || (q.next.Equal(w.arrived) && q.nextFrac > 0) {
		return q.next, q.nextFrac
	}
	return w.arrived, 0
}

// leave takes w out of the queue after its context ended and returns err.
func (q *Queue) leave(w *waiter, err error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(w)
	return err
}

// removeLocked unlinks w and, if it was at the front, hands the front to the
// next caller, which then waits for the same release instant w did.
func (q *Queue) removeLocked(w *waiter) {
	wasFront := q.waiting.Front() == w.elem
	q.waiting.Remove(w.elem)
	if f := q.waiting.Front(); wasFront && f != nil {
		close(f.Value.(*waiter).front)
	}
}
