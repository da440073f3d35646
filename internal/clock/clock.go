// Package clock injects time into Allot's algorithms and loops.
// Production code uses Real; tests use a Fake that moves only when told to.
package clock

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Clock tells the time and makes timers. Code that decides anything from the
// time takes a Clock (or an explicit now) so that tests never sleep.
type Clock interface {
	// Now is the wall clock (with the machine's monotonic reading, on the
	// real clock).
	Now() time.Time
	// Mono is the time elapsed on the monotonic clock since an origin of
	// the clock's own: it never jumps when the wall clock is stepped.
	Mono() time.Duration
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that Allot uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration)
}

// Real returns the wall and monotonic clock of the machine.
func Real() Clock { return realClock{} }

type realClock struct{}

// origin is the real clock's monotonic origin.
var origin = time.Now()

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Mono() time.Duration { return time.Since(origin) }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a Clock that moves only through Advance and StepWall. Its timers
// run on its monotonic time and fire inside Advance, in deadline order, so
// a test controls every instant. The zero value is not usable; call
// NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	mono    time.Duration
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

// NewFake returns a Fake clock that reads start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake instant.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Mono returns the fake monotonic time: what Advance has added up.
func (f *Fake) Mono() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// StepWall moves only the wall clock, by d either way, as an operator or
// NTP stepping the machine's clock does: Mono and the timers do not see it.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// Advance moves the clock forward by d and fires every timer due by then.
// A negative d steps the wall clock back only, as StepWall does.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		f.StepWall(d)
		return
	}
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mono += d
	now, mono := f.now, f.mono
	var due []*fakeTimer
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.when <= mono {
			due = append(due, t)
			t.active = false
		} else {
			kept = append(kept, t)
		}
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.notifyLocked()
	// Sorted under the lock: a fired timer may be Reset (its when written)
	// as soon as the lock is released.
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return cmp.Compare(a.when, b.when) })
	f.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- now:
		default: // like time.Timer, a fired timer's channel holds one value
		}
	}
}

// Timers reports how many timers are armed: a test waits until a goroutine
// under test is parked on a timer before it advances the clock.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitTimers blocks until at least n timers are armed or the deadline of
// real time passes; it reports whether n were reached. It spares tests from
// sleeping to let a goroutine reach its wait.
func (f *Fake) WaitTimers(n int, within time.Duration) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		got, changed := len(f.timers), f.changed
		f.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// NewTimer returns a timer that fires when the fake clock reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Duration // on the monotonic time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.removeLocked()
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	t.removeLocked()
	t.when = t.f.mono + d
	fire := d <= 0
	if !fire {
		t.active = true
		t.f.timers = append(t.f.timers, t)
		t.f.notifyLocked()
	}
	now := t.f.now
	t.f.mu.Unlock()
	if fire {
		select {
		case t.c <- now:
		default:
		}
	}
}

func (t *fakeTimer) removeLocked() bool {
	if !t.active {
		return false
	}
	t.active = false
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			break
		}
	}
	t.f.notifyLocked()
	return true
}
