package bucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/clock"
)

// A burst of 3, then one request per second. The time is a parameter: read
// the clock once per request, or pass the instant the request arrived.
func ExampleTokenBucket() {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := bucket.NewTokenBucket(3, 1, start)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, after := range []time.Duration{0, 0, 0, 0, 1500 * time.Millisecond} {
		d, _ := b.AllowN(start.Add(after), 1)
		fmt.Printf("at %v: allowed %v, remaining %d, retry after %v\n", after, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// A cost that can never pass is an error, not a refusal.
	_, err = b.AllowN(start, 4)
	fmt.Println(err)
	// Output:
	// at 0s: allowed true, remaining 2, retry after 0s
	// at 0s: allowed true, remaining 1, retry after 0s
	// at 0s: allowed true, remaining 0, retry after 0s
	// at 0s: allowed false, remaining 0, retry after 1s
	// at 1.5s: allowed true, remaining 0, retry after 0s
	// bucket: cost exceeds capacity
}

// "2 per second and 3 per minute": a request passes only if both rules let
// it, a refused one costs nothing, and the refusing rule says when to retry.
func ExampleMulti() {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	perSecond, _ := bucket.NewTokenBucket(2, 2, start)
	perMinute, _ := bucket.NewFixedWindow(3, time.Minute, start)
	m, err := bucket.NewMulti(perSecond, perMinute)
	if err != nil {
		fmt.Println(err)
		return
	}
	each := make([]bucket.Decision, 0, 2)
	for _, after := range []time.Duration{0, 0, 0, time.Second, 2 * time.Second} {
		var d bucket.Decision
		d, each, _ = m.AllowNEach(start.Add(after), 1, each) // each is reused: no allocation
		refusedBy := ""
		for i, rule := range []string{"per second", "per minute"} {
			if !each[i].Allowed {
				refusedBy += " refused by " + rule
			}
		}
		fmt.Printf("at %v: allowed %v, retry after %v%s\n", after, d.Allowed, d.RetryAfter, refusedBy)
	}
	// Output:
	// at 0s: allowed true, retry after 0s
	// at 0s: allowed true, retry after 0s
	// at 0s: allowed false, retry after 500ms refused by per second
	// at 1s: allowed true, retry after 0s
	// at 2s: allowed false, retry after 58s refused by per minute
}

// A bucket filled by a lease rather than by time.
func ExampleNewLeasedBucket() {
	b, _ := bucket.NewLeasedBucket(100)
	now := time.Now()
	fmt.Println(b.Allow(now))
	fmt.Println(b.Deposit(150), "of 150 fitted") // the rest goes back to the allocator
	d, _ := b.AllowN(now, 30)
	fmt.Println(d.Allowed, d.Remaining)
	fmt.Println(b.Drain(), "returned on expiry")
	// Output:
	// false
	// 100 of 150 fitted
	// true 70
	// 70 returned on expiry
}

// Callers wait their turn, released one every 1/rate; a full queue turns
// them away at once.
func ExampleQueue() {
	q, err := bucket.NewQueue(100, 10, clock.Real()) // 100 per second, 10 may wait
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Now()
	for range 3 {
		if err := q.Wait(context.Background()); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("three releases took at least 20ms:", time.Since(start) >= 20*time.Millisecond)
	// Output: three releases took at least 20ms: true
}
