package chaos

import (
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
)

// steppedClock is the machine's clock with a wall-clock offset the test
// steps, as an operator or NTP steps a host's clock: Now jumps, Mono and
// timers do not. Now carries no monotonic reading, so a duration measured
// between two Now readings sees the step (on time.Now, Go would hide it
// behind the monotonic reading): whatever an SDK or store measures on Now
// moves with the step.
type steppedClock struct{ offset atomic.Int64 }

var machine = clock.Real()

func (c *steppedClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.offset.Load()))
}

func (c *steppedClock) Mono() time.Duration { return machine.Mono() }

func (c *steppedClock) NewTimer(d time.Duration) clock.Timer { return machine.NewTimer(d) }

// Step moves the wall clock by d, either way.
func (c *steppedClock) Step(d time.Duration) { c.offset.Add(int64(d)) }
