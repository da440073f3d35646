package bucket_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

// newBurstAndSustained is "2 per second AND 3 per minute".
func newBurstAndSustained(t *testing.T) (*bucket.Multi, *bucket.TokenBucket, *bucket.FixedWindow) {
	t.Helper()
	perSecond := newTokenBucket(t, 2, 2, t0)
	perMinute, err := bucket.NewFixedWindow(3, time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := bucket.NewMulti(perSecond, perMinute)
	if err != nil {
		t.Fatal(err)
	}
	return m, perSecond, perMinute
}

func TestMulti(t *testing.T) {
	m, _, _ := newBurstAndSustained(t)
	ms, s := time.Millisecond, time.Second
	run(t, m, []step{
		// Allowed: the rule with the fewest tokens left speaks.
		{"both pass; minute has 2 left, second 1", t0, 1, pass(2, 1, 500*ms), nil},
		{"both pass; second has 0 left", t0, 1, pass(2, 0, s), nil},
		// Refused by the per-second rule: its retry, and nothing spent anywhere.
		{"per-second refuses", t0, 1, refuse(2, 0, 500*ms, s), nil},
		{"again", t0.Add(100 * ms), 1, refuse(2, 0, 400*ms, 900*ms), nil},
		// Had the refusals spent from the per-minute rule, it would be empty now.
		{"per-minute still has its last token", t0.Add(500 * ms), 1, pass(3, 0, 59500*ms), nil},
		// Both refuse: the longest wait wins, Remaining is the least held.
		{"per-minute refuses, wait for the next minute", t1, 1, refuse(3, 0, 59*s, 59*s), nil},
		{"next minute", t0.Add(time.Minute), 2, pass(2, 0, s), nil},
		{"cost above the smallest rule", t0.Add(time.Minute), 3, bucket.Decision{}, bucket.ErrCostAboveCapacity},
		{"zero cost", t0.Add(time.Minute), 0, bucket.Decision{}, bucket.ErrInvalidCost},
	})
}

func TestMultiRefusalSpendsFromNone(t *testing.T) {
	wide := newTokenBucket(t, 5, 1, t0)
	narrow := newTokenBucket(t, 1, 1, t0)
	m, err := bucket.NewMulti(wide, narrow)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Allow(t0) {
		t.Fatal("first request refused")
	}
	for range 10 {
		if m.Allow(t0) {
			t.Fatal("narrow rule let a second request through")
		}
	}
	run(t, wide, []step{{"wide paid only once", t0, 4, pass(5, 0, 5*time.Second), nil}})
}

func TestMultiEachShowsTheRefusingRule(t *testing.T) {
	m, _, _ := newBurstAndSustained(t)
	each := make([]bucket.Decision, 0, 2)
	for range 2 {
		if _, each, _ = m.AllowNEach(t0, 1, each); len(each) != 2 {
			t.Fatalf("got %d decisions, want 2", len(each))
		}
	}
	d, each, err := m.AllowNEach(t0, 1, each)
	if err != nil || d.Allowed {
		t.Fatalf("third request: %+v, %v; want refused", d, err)
	}
	// The per-minute rule alone would have let it through; nothing was spent.
	want := []bucket.Decision{
		refuse(2, 0, 500*time.Millisecond, time.Second),
		pass(3, 0, time.Minute),
	}
	if len(each) != 2 || each[0] != want[0] || each[1] != want[1] {
		t.Fatalf("each = %+v, want %+v", each, want)
	}
	if a := testing.AllocsPerRun(100, func() { _, each, _ = m.AllowNEach(t0, 1, each) }); a != 0 {
		t.Errorf("AllowNEach with a reused slice allocates %v times", a)
	}
}

// Multis that share rules, listed in opposite orders, lock them in one
// global order and so cannot deadlock; the concurrency test runs them hard.
func TestMultiSharedRulesOppositeOrder(t *testing.T) {
	a := newTokenBucket(t, 100, 1, t0)
	b, err := bucket.NewSlidingLog(100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ab, err1 := bucket.NewMulti(a, b)
	ba, err2 := bucket.NewMulti(b, a)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if got := countAllowed(1000, func(i int) bool {
		if i%2 == 0 {
			return ab.Allow(t0)
		}
		return ba.Allow(t0)
	}); got != 100 {
		t.Fatalf("two Multis over the same rules passed %d, want 100", got)
	}
}

func TestNewMultiRejects(t *testing.T) {
	tb := newTokenBucket(t, 1, 1, t0)
	other, _ := bucket.NewMulti(tb)
	var nilBucket *bucket.TokenBucket
	for _, c := range []struct {
		name     string
		limiters []bucket.Limiter
		want     string
	}{
		{"none", nil, "at least one limiter"},
		{"foreign", []bucket.Limiter{tb, foreign{}}, "limiter 1 (bucket_test.foreign) is not a limiter made by package bucket"},
		{"nested", []bucket.Limiter{other}, "limiter 0 (*bucket.Multi) is not"},
		{"nil", []bucket.Limiter{nil}, "limiter 0 (<nil>) is not"},
		{"typed nil", []bucket.Limiter{nilBucket}, "limiter 0 (*bucket.TokenBucket) is not"},
		{"twice", []bucket.Limiter{tb, tb}, "limiter 1 is given twice"},
	} {
		_, err := bucket.NewMulti(c.limiters...)
		if err == nil || !strings.Contains(err.Error(), "bucket: multi: "+c.want) {
			t.Errorf("%s: NewMulti error %v, want %q", c.name, err, c.want)
		}
	}
}

type foreign struct{}

func (foreign) AllowN(time.Time, int64) (bucket.Decision, error) { return bucket.Decision{}, nil }
