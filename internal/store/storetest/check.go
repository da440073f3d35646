package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Check, the strict decision of one request, on every algorithm.

func testCheckBucket(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 10)
	for i := 0; i < 10; i++ {
		if d := check(t, s, r, "k", 1); !d.Allowed || d.Remaining != int64(9-i) || d.Limit != 10 {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	d := check(t, s, r, "k", 1)
	if d.Allowed || d.Remaining != 0 {
		t.Fatalf("11th check: %+v, want refused", d)
	}
	// One token a day / 10 ... one token takes 2h24m at 10 per day.
	if want := slow / 10; d.RetryAfter < want-time.Minute || d.RetryAfter > want {
		t.Fatalf("retry_after %v, want about %v", d.RetryAfter, want)
	}
	if d.ResetAfter < d.RetryAfter {
		t.Fatalf("reset_after %v before retry_after %v", d.ResetAfter, d.RetryAfter)
	}
}

func testCheckFixedWindow(t *testing.T, h Harness) {
	s := h.New(t)
	r := windowRule(t, rules.FixedWindow, 5, slow)
	if d := check(t, s, r, "k", 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost 5 of 5: %+v", d)
	}
	d := check(t, s, r, "k", 1)
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter != d.ResetAfter {
		t.Fatalf("6th: %+v, want refused until the window resets", d)
	}
}

func testCheckSlidingLog(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 5, Period: time.Hour})
	for i := 0; i < 5; i++ {
		if d := check(t, s, r, "k", 1); !d.Allowed {
			t.Fatalf("attempt %d refused: %+v", i+1, d)
		}
	}
	d := check(t, s, r, "k", 1)
	if d.Allowed || d.Remaining != 0 {
		t.Fatalf("6th attempt: %+v, want refused", d)
	}
	if d.RetryAfter < time.Hour-time.Minute || d.RetryAfter > time.Hour {
		t.Fatalf("retry_after %v, want about an hour (when the oldest entry leaves)", d.RetryAfter)
	}
	// A cost of 2 on a fresh key takes two entries.
	if d := check(t, s, r, "k2", 2); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("cost 2: %+v, want remaining 3", d)
	}
}

func testCheckCostAboveCapacity(t *testing.T, h Harness) {
	s := h.New(t)
	for _, r := range []*rules.Rule{bucketRule(t, 10), windowRule(t, rules.FixedWindow, 10, slow),
		rule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 10, Period: time.Hour})} {
		if _, err := s.Check(context.Background(), r, "k", 11); !errors.Is(err, store.ErrCostAboveCapacity) {
			t.Fatalf("%s: cost 11 of 10: %v, want ErrCostAboveCapacity", r.Algorithm, err)
		}
	}
}
