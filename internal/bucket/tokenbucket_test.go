package bucket_test

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

func newTokenBucket(t *testing.T, capacity int64, rate float64, now time.Time) *bucket.TokenBucket {
	t.Helper()
	b, err := bucket.NewTokenBucket(capacity, rate, now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTokenBucketBurstThenRate(t *testing.T) {
	b := newTokenBucket(t, 3, 1, t0)
	ms := time.Millisecond
	run(t, b, []step{
		{"full at start", t0, 1, pass(3, 2, 1*time.Second), nil},
		{"burst", t0, 1, pass(3, 1, 2*time.Second), nil},
		{"last of burst", t0, 1, pass(3, 0, 3*time.Second), nil},
		{"capacity spent", t0, 1, refuse(3, 0, 1*time.Second, 3*time.Second), nil},
		{"one ms short", t1.Add(-ms), 1, refuse(3, 0, ms, 2*time.Second+ms), nil},
		{"one token after 1/rate", t1, 1, pass(3, 0, 3*time.Second), nil},
		{"and only one", t1, 1, refuse(3, 0, time.Second, 3*time.Second), nil},
		{"half way", t1.Add(500 * ms), 1, refuse(3, 0, 500*ms, 2500*ms), nil},
		{"two seconds idle", t3, 2, pass(3, 0, 3*time.Second), nil},
	})
}

func TestTokenBucketIdleNeverExceedsCapacity(t *testing.T) {
	b := newTokenBucket(t, 3, 1, t0)
	run(t, b, []step{
		{"spend all", t0, 3, pass(3, 0, 3*time.Second), nil},
		{"an hour idle: full, no more", t0.Add(time.Hour), 3, pass(3, 0, 3*time.Second), nil},
		{"nothing left over", t0.Add(time.Hour), 1, refuse(3, 0, time.Second, 3*time.Second), nil},
		{"a century idle", t0.Add(100 * 365 * 24 * time.Hour), 1, pass(3, 2, time.Second), nil},
	})
}

func TestTokenBucketCosts(t *testing.T) {
	b := newTokenBucket(t, 5, 2, t0)
	ms := time.Millisecond
	run(t, b, []step{
		{"n>1", t0, 3, pass(5, 2, 1500*ms), nil},
		{"n>remaining is refused", t0, 3, refuse(5, 2, 500*ms, 1500*ms), nil},
		{"refusal spent nothing", t0, 2, pass(5, 0, 2500*ms), nil},
		{"n>capacity is an error", t0, 6, bucket.Decision{}, bucket.ErrCostAboveCapacity},
		{"retry-after for a cost of 5", t0, 5, refuse(5, 0, 2500*ms, 2500*ms), nil},
		{"exactly when promised", t0.Add(2500 * ms), 5, pass(5, 0, 2500*ms), nil},
	})
}

func TestTokenBucketClockBackwards(t *testing.T) {
	b := newTokenBucket(t, 2, 1, t5)
	run(t, b, []step{
		{"spend all at t5", t5, 2, pass(2, 0, 2*time.Second), nil},
		{"t3: nothing minted, waits measured from t3", t3, 1, refuse(2, 0, 3*time.Second, 4*time.Second), nil},
		{"back at t5: still nothing", t5, 1, refuse(2, 0, time.Second, 2*time.Second), nil},
		{"t6: the one token that t5..t6 brings", t6, 1, pass(2, 0, 2*time.Second), nil},
		{"and not a second one", t6, 1, refuse(2, 0, time.Second, 2*time.Second), nil},
	})
}

// An integer-friendly rate whose period is not a whole number of
// nanoseconds: 3/s. Kept below capacity, the bucket's k-th token arrives at
// exactly ceil(k/3 s): the fraction of a token is never rounded away.
func TestTokenBucketExactThirds(t *testing.T) {
	b := newTokenBucket(t, 10, 3, t0)
	ns := time.Nanosecond
	third := 333333333 * ns
	run(t, b, []step{
		{"spend the burst", t0, 10, pass(10, 0, 3333333334*ns), nil},
		{"1/3 s is 333333333.3 ns", t0.Add(third), 1, refuse(10, 0, ns, 3000000001*ns), nil},
		{"first token", t0.Add(third + ns), 1, pass(10, 0, 3333333333*ns), nil},
		{"2/3 s is 666666666.7 ns", t0.Add(2 * third), 1, refuse(10, 0, ns, 3000000001*ns), nil},
		{"second token", t0.Add(2*third + ns), 1, pass(10, 0, 3333333333*ns), nil},
		{"third token exactly at 1 s", t1, 1, pass(10, 0, 3333333334*ns), nil},
	})
	// A million more tokens, one per call at the exact instant each is due.
	for k := int64(1); k <= 1_000_000; k++ {
		due := t1.Add(time.Duration((k*int64(time.Second) + 2) / 3)) // ceil(k/3 s)
		if !b.Allow(due) || b.Allow(due) {
			t.Fatalf("token %d: not exactly one token at %v", k, due.Sub(t1))
		}
	}
}

func TestTokenBucketFloatRatesReadAsFractions(t *testing.T) {
	cases := []struct {
		rate     float64
		interval time.Duration
	}{
		{1000.0 / 60, 60 * time.Millisecond}, // 1,000 a minute
		{0.1, 10 * time.Second},
		{1.0 / 3600, time.Hour},
		{1e9, time.Nanosecond},
		{2.5, 400 * time.Millisecond},
	}
	for _, c := range cases {
		b := newTokenBucket(t, 1, c.rate, t0)
		run(t, b, []step{
			{"spend", t0, 1, pass(1, 0, c.interval), nil},
			{"a nanosecond early", t0.Add(c.interval - 1), 1, refuse(1, 0, 1, 1), nil},
			{"on time", t0.Add(c.interval), 1, pass(1, 0, c.interval), nil},
			{"many intervals on", t0.Add(1000 * c.interval), 1, pass(1, 0, c.interval), nil},
			{"and again a nanosecond early", t0.Add(1001*c.interval - 1), 1, refuse(1, 0, 1, 1), nil},
		})
	}
}

func TestTokenBucketPer(t *testing.T) {
	b, err := bucket.NewTokenBucketPer(200, 1000, time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, []step{
		{"burst of 200", t0, 200, pass(200, 0, 12*time.Second), nil},
		{"one token per 60 ms", t0.Add(60 * time.Millisecond), 2, refuse(200, 1, 60*time.Millisecond, 11940*time.Millisecond), nil},
		{"after 1 s, 16 (16.67) tokens", t1, 16, pass(200, 0, 11960*time.Millisecond), nil},
	})
}

func TestLeasedBucket(t *testing.T) {
	b, err := bucket.NewLeasedBucket(10)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, []step{
		{"empty: time cannot say when", t0, 1, refuse(10, 0, 0, 0), nil},
	})
	if got := b.Deposit(4); got != 4 {
		t.Fatalf("Deposit(4) = %d, want 4", got)
	}
	run(t, b, []step{
		{"lease tokens", t0, 3, pass(10, 1, 0), nil},
		{"time brings nothing", t0.Add(time.Hour), 2, refuse(10, 1, 0, 0), nil},
	})
	if got := b.Deposit(20); got != 9 {
		t.Fatalf("Deposit(20) into 1 of 10 = %d, want 9 fitted", got)
	}
	if got := b.Deposit(0) + b.Deposit(-5); got != 0 {
		t.Fatalf("Deposit of nothing added %d", got)
	}
	if got := b.Drain(); got != 10 {
		t.Fatalf("Drain() = %d, want 10", got)
	}
	run(t, b, []step{{"drained", t0.Add(time.Hour), 1, refuse(10, 0, 0, 0), nil}})
}

func TestTokenBucketDepositCapsAndKeepsRefill(t *testing.T) {
	b := newTokenBucket(t, 4, 2, t0)
	ms := time.Millisecond
	run(t, b, []step{{"spend all", t0, 4, pass(4, 0, 2*time.Second), nil}})
	if got := b.Deposit(2); got != 2 {
		t.Fatalf("Deposit(2) = %d", got)
	}
	run(t, b, []step{
		{"deposit plus 1.5 tokens of refill", t0.Add(750 * ms), 3, pass(4, 0, 1750*ms), nil},
		{"refill continues from the half token", t0.Add(1000 * ms), 2, refuse(4, 1, 500*ms, 1500*ms), nil},
	})
	if got := b.Deposit(100); got != 3 {
		t.Fatalf("Deposit(100) = %d, want 3 (capped at 4)", got)
	}
	run(t, b, []step{{"full", t1, 4, pass(4, 0, 2*time.Second), nil}})
}

func TestTokenBucketZeroAllocs(t *testing.T) {
	b := newTokenBucket(t, 1<<40, 1e9, t0)
	now := t0
	if a := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Nanosecond)
		if _, err := b.AllowN(now, 3); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("AllowN allocates %v times per call, want 0", a)
	}
}

func TestConstructorsNameTheField(t *testing.T) {
	nan := func() float64 { var z float64; return z / z }()
	inf := func() float64 { var z float64; return 1 / z }()
	cases := []struct {
		name string
		err  func() error
		want string
	}{
		{"capacity 0", func() error { _, err := bucket.NewTokenBucket(0, 1, t0); return err }, "token bucket: capacity must be positive"},
		{"capacity <0", func() error { _, err := bucket.NewLeasedBucket(-1); return err }, "token bucket: capacity must be positive"},
		{"rate 0", func() error { _, err := bucket.NewTokenBucket(1, 0, t0); return err }, "token bucket: rate must be positive"},
		{"rate <0", func() error { _, err := bucket.NewTokenBucket(1, -1, t0); return err }, "token bucket: rate must be positive"},
		{"rate NaN", func() error { _, err := bucket.NewTokenBucket(1, nan, t0); return err }, "token bucket: rate must be positive"},
		{"rate Inf", func() error { _, err := bucket.NewTokenBucket(1, inf, t0); return err }, "token bucket: rate must be positive"},
		{"rate tiny", func() error { _, err := bucket.NewTokenBucket(1, 1e-300, t0); return err }, "token bucket: rate 1e-300 tokens/s is out of range"},
		{"rate huge", func() error { _, err := bucket.NewTokenBucket(1, 1e300, t0); return err }, "token bucket: rate 1e+300 tokens/s is out of range"},
		{"tokens 0", func() error { _, err := bucket.NewTokenBucketPer(1, 0, time.Second, t0); return err }, "token bucket: tokens per period must be positive"},
		{"period 0", func() error { _, err := bucket.NewTokenBucketPer(1, 1, 0, t0); return err }, "token bucket: period must be positive"},
		{"fixed limit", func() error { _, err := bucket.NewFixedWindow(0, time.Second, t0); return err }, "fixed window: limit must be positive"},
		{"fixed window", func() error { _, err := bucket.NewFixedWindow(1, -time.Second, t0); return err }, "fixed window: window must be positive"},
		{"log limit", func() error { _, err := bucket.NewSlidingLog(-1, time.Second); return err }, "sliding log: limit must be positive"},
		{"log window", func() error { _, err := bucket.NewSlidingLog(1, 0); return err }, "sliding log: window must be positive"},
		{"sliding limit", func() error { _, err := bucket.NewSlidingWindow(0, time.Second); return err }, "sliding window: limit must be positive"},
		{"sliding window", func() error { _, err := bucket.NewSlidingWindow(1, 0); return err }, "sliding window: window must be positive"},
	}
	for _, c := range cases {
		err := c.err()
		if err == nil || !strings.Contains(err.Error(), "bucket: "+c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, "bucket: "+c.want)
		}
	}
}

func TestTokenBucketCap(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b, err := bucket.NewTokenBucketPer(10, 10, time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		b.Allow(t0)
	}
	// Half a second of refill (5 tokens) is counted before the cap of 3.
	b.Cap(t0.Add(500*time.Millisecond), 3)
	if d, _ := b.AllowN(t0.Add(500*time.Millisecond), 3); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after Cap(3): %+v, want exactly 3 tokens", d)
	}
	// A cap above what the bucket holds changes nothing.
	b.Cap(t0.Add(700*time.Millisecond), 100)
	if d, _ := b.AllowN(t0.Add(700*time.Millisecond), 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after a loose cap: %+v, want the 2 refilled tokens", d)
	}
}
