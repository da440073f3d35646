package sim

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/clock"
)

// epoch is the wall-clock instant a run begins at.
var epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// storeClock is the store's clock (Redis TIME): true time plus the store's
// offset, which a fault may step either way. It is a clock.Clock for the
// memory store and the allocator service; their timers never fire (the
// simulator drives every instant, and the store's sweeper only forgets
// what has expired, which changes nothing it answers).
type storeClock struct {
	w      *World
	offset time.Duration
}

func (c *storeClock) at(t time.Duration) time.Duration { return t + c.offset }

// Now is the store's wall clock now.
func (c *storeClock) Now() time.Time { return epoch.Add(c.at(c.w.now)) }

// Mono is the allocator's monotonic clock: true time (an allocator's own
// clock does not step).
func (c *storeClock) Mono() time.Duration { return c.w.now }

func (c *storeClock) NewTimer(time.Duration) clock.Timer { return idleTimer{} }

type idleTimer struct{}

func (idleTimer) C() <-chan time.Time { return nil }
func (idleTimer) Stop() bool          { return true }
func (idleTimer) Reset(time.Duration) {}

// nodeClock is one node's clocks: a monotonic one from its own origin,
// running off true time by its drift, and a wall clock skewed from true
// time, which a fault may step either way.
type nodeClock struct {
	origin time.Duration // the monotonic reading at true time 0
	drift  float64       // parts of a second per second
	skew   time.Duration // the wall clock's error
}

func (c *nodeClock) mono(t time.Duration) time.Duration {
	return c.origin + t + time.Duration(c.drift*float64(t))
}

// trueAt is the earliest true time at which the monotonic clock reads m
// or more.
func (c *nodeClock) trueAt(m time.Duration) time.Duration {
	t := time.Duration(math.Ceil(float64(m-c.origin) / (1 + c.drift)))
	for c.mono(t) < m { // (float rounding)
		t++
	}
	return t
}

func (c *nodeClock) wall(t time.Duration) time.Time { return epoch.Add(t + c.skew) }
