package bucket_test

import (
	"errors"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

// Named instants, as in golang.org/x/time/rate's tests. t0 is a multiple of
// every window used in these tests, so epoch-aligned windows start there.
var (
	t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 = t0.Add(1 * time.Second)
	t2 = t0.Add(2 * time.Second)
	t3 = t0.Add(3 * time.Second)
	t4 = t0.Add(4 * time.Second)
	t5 = t0.Add(5 * time.Second)
	t6 = t0.Add(6 * time.Second)
)

// step is one request in a table: at an instant, of a cost, and the exact
// decision (or error) it must get.
type step struct {
	name string
	at   time.Time
	n    int64
	want bucket.Decision
	err  error
}

// pass and refuse spell decisions compactly in tables.
func pass(limit, remaining int64, reset time.Duration) bucket.Decision {
	return bucket.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func refuse(limit, remaining int64, retry, reset time.Duration) bucket.Decision {
	return bucket.Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// run plays steps against l in order and checks every decision exactly.
func run(t *testing.T, l bucket.Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		got, err := l.AllowN(s.at, s.n)
		if !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
			t.Fatalf("step %d %q: AllowN(t0+%v, %d) error = %v, want %v", i, s.name, s.at.Sub(t0), s.n, err, s.err)
		}
		if s.err == nil && got != s.want {
			t.Errorf("step %d %q: AllowN(t0+%v, %d)\n got %+v\nwant %+v", i, s.name, s.at.Sub(t0), s.n, got, s.want)
		}
	}
}

// eachLimiter builds one of every Limiter this package makes, all with the
// same limit, for tests that hold for every algorithm.
func eachLimiter(t testing.TB, limit int64, now time.Time) map[string]bucket.Limiter {
	t.Helper()
	tb, err1 := bucket.NewTokenBucket(limit, 1, now)
	fw, err2 := bucket.NewFixedWindow(limit, time.Hour, now)
	sl, err3 := bucket.NewSlidingLog(limit, time.Hour)
	sw, err4 := bucket.NewSlidingWindow(limit, time.Hour)
	inner, err5 := bucket.NewTokenBucket(limit, 1, now)
	outer, err6 := bucket.NewFixedWindow(10*limit, time.Hour, now)
	multi, err7 := bucket.NewMulti(inner, outer)
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		t.Fatal(err)
	}
	return map[string]bucket.Limiter{
		"token_bucket": tb, "fixed_window": fw, "sliding_log": sl, "sliding_window": sw, "multi": multi,
	}
}

func TestCostErrors(t *testing.T) {
	for name, l := range eachLimiter(t, 5, t0) {
		t.Run(name, func(t *testing.T) {
			run(t, l, []step{
				{"zero cost", t0, 0, bucket.Decision{}, bucket.ErrInvalidCost},
				{"negative cost", t0, -3, bucket.Decision{}, bucket.ErrInvalidCost},
				{"never fits", t0, 6, bucket.Decision{}, bucket.ErrCostAboveCapacity},
				{"errors spent nothing", t0, 5, pass(5, 0, resetAfterFull(name)), nil},
			})
		})
	}
}

// resetAfterFull is what each algorithm of eachLimiter reports as ResetAfter
// right after spending all 5 tokens at t0.
func resetAfterFull(name string) time.Duration {
	switch name {
	case "token_bucket", "multi":
		return 5 * time.Second // 5 tokens at 1/s
	case "sliding_window":
		return 2 * time.Hour // counted until the next window has faded
	}
	return time.Hour
}

func TestNoPanicOnAnyCost(t *testing.T) {
	costs := []int64{-1 << 63, -1, 0, 1, 5, 6, 1<<63 - 1}
	instants := []time.Time{t0, {}, time.Unix(0, -1<<63), time.Unix(0, 1<<63-1), t0.Add(-time.Hour)}
	for name, l := range eachLimiter(t, 5, t0) {
		for _, at := range instants {
			for _, n := range costs {
				d, err := l.AllowN(at, n)
				if err == nil && (d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0) {
					t.Errorf("%s: AllowN(%v, %d) = %+v: negative field", name, at, n, d)
				}
			}
		}
	}
}
