package bucket_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

// Named instants, as in golang.org/x/time/rate's tests.
var (
	t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 = t0.Add(1 * time.Second)
	t3 = t0.Add(3 * time.Second)
	t5 = t0.Add(5 * time.Second)
	t6 = t0.Add(6 * time.Second)
)

// step is one request in a table: at an instant, and whether it must pass.
type step struct {
	name string
	at   time.Time
	want bool
}

func run(t *testing.T, b *bucket.TokenBucket, steps []step) {
	t.Helper()
	for _, s := range steps {
		if got := b.Allow(s.at); got != s.want {
			t.Fatalf("%s: Allow(t0+%v) = %v, want %v", s.name, s.at.Sub(t0), got, s.want)
		}
	}
}

func newBucket(t *testing.T, capacity, tokens int64, period time.Duration, now time.Time) *bucket.TokenBucket {
	t.Helper()
	b, err := bucket.NewTokenBucketPer(capacity, tokens, period, now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A burst of 3, then one a second: the time is a parameter, so a caller
// reads its clock once, or passes the instant the event happened.
func ExampleTokenBucket() {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := bucket.NewTokenBucketPer(3, 1, time.Second, start)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, after := range []time.Duration{0, 0, 0, 0, 1500 * time.Millisecond, 1500 * time.Millisecond} {
		fmt.Printf("at %v: %v\n", after, b.Allow(start.Add(after)))
	}
	// Output:
	// at 0s: true
	// at 0s: true
	// at 0s: true
	// at 0s: false
	// at 1.5s: true
	// at 1.5s: false
}

func TestTokenBucketBurstThenRate(t *testing.T) {
	b := newBucket(t, 3, 1, time.Second, t0)
	ms := time.Millisecond
	run(t, b, []step{
		{"full at start", t0, true},
		{"burst", t0, true},
		{"last of burst", t0, true},
		{"capacity spent", t0, false},
		{"one ms short", t1.Add(-ms), false},
		{"one token after 1/rate", t1, true},
		{"and only one", t1, false},
		{"half way", t1.Add(500 * ms), false},
		{"two seconds idle: two tokens", t3, true},
		{"the second", t3, true},
		{"and no third", t3, false},
	})
}

func TestTokenBucketIdleNeverExceedsCapacity(t *testing.T) {
	b := newBucket(t, 3, 1, time.Second, t0)
	hour := t0.Add(time.Hour)
	run(t, b, []step{
		{"spend", t0, true}, {"spend", t0, true}, {"spend all", t0, true},
		{"an hour idle: full", hour, true}, {"full", hour, true}, {"full", hour, true},
		{"no more than full", hour, false},
		{"a century idle", t0.Add(100 * 365 * 24 * time.Hour), true},
	})
}

func TestTokenBucketClockBackwards(t *testing.T) {
	b := newBucket(t, 2, 1, time.Second, t5)
	run(t, b, []step{
		{"spend at t5", t5, true},
		{"spend all at t5", t5, true},
		{"t3: nothing minted", t3, false},
		{"back at t5: still nothing", t5, false},
		{"t6: the one token that t5..t6 brings", t6, true},
		{"and not a second one", t6, false},
	})
}

// A rate whose period is not a whole number of nanoseconds: 3/s. Kept below
// capacity, the bucket's k-th token arrives at exactly ceil(k/3 s): the
// fraction of a token is never rounded away.
func TestTokenBucketExactThirds(t *testing.T) {
	b := newBucket(t, 10, 3, time.Second, t0)
	for range 10 {
		b.Allow(t0)
	}
	ns := time.Nanosecond
	third := 333333333 * ns
	run(t, b, []step{
		{"burst spent", t0, false},
		{"1/3 s is 333333333.3 ns", t0.Add(third), false},
		{"first token", t0.Add(third + ns), true},
		{"2/3 s is 666666666.7 ns", t0.Add(2 * third), false},
		{"second token", t0.Add(2*third + ns), true},
		{"third token exactly at 1 s", t1, true},
		{"and no fourth", t1, false},
	})
	// A million more tokens, one per call at the exact instant each is due.
	for k := int64(1); k <= 1_000_000; k++ {
		due := t1.Add(time.Duration((k*int64(time.Second) + 2) / 3)) // ceil(k/3 s)
		if b.Allow(due.Add(-ns)) || !b.Allow(due) || b.Allow(due) {
			t.Fatalf("token %d: not exactly one token, at %v", k, due.Sub(t1))
		}
	}
}

func TestTokenBucketPer(t *testing.T) {
	b := newBucket(t, 200, 1000, time.Minute, t0)
	for i := range 200 {
		if !b.Allow(t0) {
			t.Fatalf("request %d of the burst of 200 refused", i+1)
		}
	}
	ms := time.Millisecond
	run(t, b, []step{
		{"burst spent", t0, false},
		{"a nanosecond before 60 ms", t0.Add(60*ms - 1), false},
		{"one token per 60 ms", t0.Add(60 * ms), true},
		{"and one only", t0.Add(60 * ms), false},
	})
	// 940 ms later: 15.67 tokens, so 15 pass.
	n := 0
	for b.Allow(t1) {
		n++
	}
	if n != 15 {
		t.Fatalf("%d passed at 1 s, want 15", n)
	}
}

// 1,000 goroutines against a capacity of 100 at one fixed instant, so
// nothing refills: exactly 100 pass. A read-then-write race would let more.
func TestTokenBucketConcurrentExactlyCapacity(t *testing.T) {
	b := newBucket(t, 100, 1, time.Second, t0)
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		allowed atomic.Int64
	)
	for range 1000 {
		wg.Go(func() {
			<-start
			if b.Allow(t0) {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != 100 {
		t.Fatalf("%d passed, want exactly 100", got)
	}
}

func TestTokenBucketZeroAllocs(t *testing.T) {
	b := newBucket(t, 1<<40, 1, time.Nanosecond, t0)
	now := t0
	if a := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Nanosecond)
		b.Allow(now)
	}); a != 0 {
		t.Errorf("Allow allocates %v times per call, want 0", a)
	}
}

func TestNewTokenBucketPerNamesTheField(t *testing.T) {
	cases := []struct {
		name                     string
		capacity, tokens, period int64
		want                     string
	}{
		{"capacity 0", 0, 1, 1, "capacity must be positive"},
		{"capacity <0", -1, 1, 1, "capacity must be positive"},
		{"tokens 0", 1, 0, 1, "tokens per period must be positive"},
		{"period 0", 1, 1, 0, "period must be positive"},
		{"period <0", 1, 1, -1, "period must be positive"},
	}
	for _, c := range cases {
		_, err := bucket.NewTokenBucketPer(c.capacity, c.tokens, time.Duration(c.period), t0)
		if want := "bucket: token bucket: " + c.want; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, want)
		}
	}
}
