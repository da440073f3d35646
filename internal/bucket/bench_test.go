package bucket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/clock"
)

// The limits below are so large that nothing is refused during a run: the
// benchmarks measure the decision, not the refusal. golang.org/x/time/rate
// runs alongside as the baseline.
//
// Two variants of each: fixed_now passes one precomputed instant (what a
// caller does when the request's arrival time is already known; the fair
// comparison with rate.Limiter.AllowN), and time_now reads time.Now() per
// decision (the fair comparison with rate.Limiter.Allow, which reads the
// clock inside; time.Now_alone shows what that read costs).

const huge = 1 << 40

// contender makes a fresh limiter at now and returns its decision.
type contender struct {
	name string
	make func(now time.Time) (func(time.Time) bool, error)
}

var contenders = []contender{
	{"token_bucket", func(now time.Time) (func(time.Time) bool, error) {
		l, err := bucket.NewTokenBucket(huge, 1e12, now)
		return l.Allow, err
	}},
	{"fixed_window", func(now time.Time) (func(time.Time) bool, error) {
		l, err := bucket.NewFixedWindow(huge, time.Hour, now)
		return l.Allow, err
	}},
	{"sliding_log", func(time.Time) (func(time.Time) bool, error) {
		// A short window: with time_now the log holds about 1 ms of entries.
		l, err := bucket.NewSlidingLog(huge, time.Millisecond)
		return l.Allow, err
	}},
	{"sliding_window", func(time.Time) (func(time.Time) bool, error) {
		l, err := bucket.NewSlidingWindow(huge, time.Hour)
		return l.Allow, err
	}},
	{"multi", func(now time.Time) (func(time.Time) bool, error) { // a token bucket AND a fixed window
		burst, err1 := bucket.NewTokenBucket(huge, 1e12, now)
		sustained, err2 := bucket.NewFixedWindow(huge, time.Hour, now)
		m, err3 := bucket.NewMulti(burst, sustained)
		return m.Allow, errors.Join(err1, err2, err3)
	}},
	{"x_time_rate", func(time.Time) (func(time.Time) bool, error) {
		l := rate.NewLimiter(rate.Limit(1e12), huge)
		return func(now time.Time) bool { return l.AllowN(now, 1) }, nil
	}},
}

func BenchmarkDecision(b *testing.B) {
	benchmarkDecisions(b, loop)
}

func BenchmarkDecisionParallel(b *testing.B) {
	benchmarkDecisions(b, loopParallel)
}

func benchmarkDecisions(b *testing.B, run func(*testing.B, func() bool)) {
	fixed := t0
	for _, c := range contenders {
		b.Run("fixed_now/"+c.name, func(b *testing.B) {
			allow, err := c.make(fixed)
			if err != nil {
				b.Fatal(err)
			}
			run(b, func() bool { return allow(fixed) })
		})
	}
	for _, c := range contenders {
		b.Run("time_now/"+c.name, func(b *testing.B) {
			allow, err := c.make(time.Now())
			if err != nil {
				b.Fatal(err)
			}
			run(b, func() bool { return allow(time.Now()) })
		})
	}
	b.Run("time_now/x_time_rate_Allow", func(b *testing.B) {
		run(b, rate.NewLimiter(rate.Limit(1e12), huge).Allow)
	})
	b.Run("time_now/time.Now_alone", func(b *testing.B) {
		run(b, func() bool { return !time.Now().IsZero() })
	})
}

func loop(b *testing.B, allow func() bool) {
	b.ReportAllocs()
	for b.Loop() {
		if !allow() {
			b.Fatal("refused: the benchmark would measure refusals")
		}
	}
}

func loopParallel(b *testing.B, allow func() bool) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !allow() {
				b.Error("refused: the benchmark would measure refusals")
				return
			}
		}
	})
}

// BenchmarkQueue times the leaky bucket as a queue: a caller's way through
// Wait (enqueue, reach the front, be released), not the pace, which is the
// rate's. idle: one caller at a time into an empty queue on a fake clock
// moved one step per call, so every release is due at once (the figure
// includes Advance); real_clock:
// the same on the machine's clock at a rate too high to make anyone wait
// (two clock reads per Wait); parallel: callers of one queue queueing
// behind each other for a nanosecond each.
func BenchmarkQueue(b *testing.B) {
	b.Run("idle", func(b *testing.B) {
		clk := clock.NewFake(t0)
		q, err := bucket.NewQueue(1000, 1, clk)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			clk.Advance(time.Millisecond) // the next release is due
			if err := q.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("real_clock", func(b *testing.B) {
		q, err := bucket.NewQueue(1e9, 1, clock.Real())
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		q, err := bucket.NewQueue(1e9, 1<<20, clock.Real())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if err := q.Wait(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
