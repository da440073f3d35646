package bucket_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/clock"
)

// countAllowed runs try from n goroutines released together and counts the
// true answers. A read-then-write race shows up as more than the limit.
func countAllowed(n int, try func(i int) bool) int64 {
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		allowed atomic.Int64
	)
	for i := range n {
		wg.Go(func() {
			<-start
			if try(i) {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return allowed.Load()
}

// 1,000 goroutines against a limit of 100 at one fixed instant, so nothing
// refills: exactly 100 pass, for every algorithm.
func TestConcurrentExactlyLimit(t *testing.T) {
	for name, l := range eachLimiter(t, 100, t0) {
		t.Run(name, func(t *testing.T) {
			got := countAllowed(1000, func(int) bool {
				d, err := l.AllowN(t0, 1)
				return err == nil && d.Allowed
			})
			if got != 100 {
				t.Fatalf("%d passed, want exactly 100", got)
			}
		})
	}
}

// Costs of 1, 2 and 3 from 1,000 goroutines never overspend: the tokens
// admitted never exceed the limit. (With hundreds of cost-1 requests among
// them, all but a token or two are spent.)
func TestConcurrentCostsNeverOverspend(t *testing.T) {
	for name, l := range eachLimiter(t, 100, t0) {
		t.Run(name, func(t *testing.T) {
			var spent atomic.Int64
			countAllowed(1000, func(i int) bool {
				n := int64(i%3 + 1)
				d, err := l.AllowN(t0, n)
				if err == nil && d.Allowed {
					spent.Add(n)
				}
				return false
			})
			if got := spent.Load(); got > 100 || got < 98 {
				t.Fatalf("spent %d tokens, want 98..100", got)
			}
		})
	}
}

// Capacity 100 and 1,000 concurrent callers: exactly 100 get in, the other
// 900 get ErrQueueFull at once, and all 100 are released, one per step, as
// the fake clock advances.
func TestConcurrentQueue(t *testing.T) {
	clk := clock.NewFake(t0)
	q, err := bucket.NewQueue(1000, 100, clk) // one release per millisecond
	if err != nil {
		t.Fatal(err)
	}
	// One caller through the idle queue first, so the schedule's next slot is
	// in the future and every later caller has to wait in the queue.
	if err := q.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 1000)
	start := make(chan struct{})
	for range 1000 {
		go func() {
			<-start
			results <- q.Wait(context.Background())
		}()
	}
	close(start)
	for range 900 {
		if err := receive(t, results); !errors.Is(err, bucket.ErrQueueFull) {
			t.Fatalf("before any release: got %v, want ErrQueueFull", err)
		}
	}
	if got := q.Len(); got != 100 {
		t.Fatalf("Len() = %d, want 100 accepted", got)
	}
	for released := range 100 {
		if !clk.WaitTimers(1, patience) {
			t.Fatalf("after %d releases, nobody waits on the clock", released)
		}
		clk.Advance(1_000_000) // 1 ms
		if err := receive(t, results); err != nil {
			t.Fatalf("release %d: %v", released, err)
		}
		if got, want := clk.Now().Sub(t0), int64(released+1)*1_000_000; int64(got) != want {
			t.Fatalf("release %d at %v, want %v", released, got, want)
		}
	}
	if got := q.Len(); got != 0 {
		t.Fatalf("Len() = %d after all releases", got)
	}
}

func receive(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-deadline():
		t.Fatal("a caller never returned")
		return nil
	}
}
