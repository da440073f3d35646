package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Many callers at once: checks and acquires never pass the limit, and a
// canceled context is refused.

func testConcurrentChecks(t *testing.T, h Harness) {
	s := h.New(t)
	for _, r := range []*rules.Rule{bucketRule(t, 100), windowRule(t, rules.FixedWindow, 100, slow),
		windowRule(t, rules.SlidingWindow, 100, slow),
		rule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 100, Period: slow})} {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := s.Check(context.Background(), r, "hot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Fatalf("%s: %d of 1000 concurrent checks allowed, want exactly 100", r.Algorithm, got)
		}
	}
}

func testConcurrentAcquires(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := []store.AcquireRequest{{Rule: r, Key: "hot", Node: fmt.Sprintf("n%d", i%16), Want: 7}}
			ls, err := s.Acquire(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(ls[0].Granted)
		}()
	}
	wg.Wait()
	left := check(t, s, r, "hot", 1)
	total := granted.Load() + left.Remaining
	if left.Allowed {
		total++
	}
	if granted.Load() > 100 || total != 100 {
		t.Fatalf("granted %d with %d left: grants must never exceed the bucket and must add up to its 100", granted.Load(), total)
	}
}

func testCanceledContext(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Check(ctx, r, "k", 1); err == nil {
		t.Fatal("Check with a canceled context succeeded")
	}
	if d := check(t, s, r, "k", 1); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("after the canceled call: %+v, want nothing spent by it", d)
	}
}
