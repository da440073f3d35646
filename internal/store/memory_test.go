package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
	"github.com/allot-dev/allot/internal/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	var clk *clock.Fake
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			clk = clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			s := store.NewMemory(clk)
			t.Cleanup(func() { s.Close() })
			return s
		},
		Advance:   func(t *testing.T, d time.Duration) { clk.Advance(d) },
		StepBack:  func(t *testing.T, d time.Duration) { clk.Advance(-d) },
		FakeClock: true,
		Now:       func() time.Time { return clk.Now() },
	})
}

func memoryRule(t *testing.T) *rules.Rule {
	t.Helper()
	r := &rules.Rule{Name: "per-key", Algorithm: rules.TokenBucket, Limit: 10, Period: time.Second}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	return r
}

func fullError(t *testing.T, err error) *store.FullError {
	t.Helper()
	var full *store.FullError
	if !errors.Is(err, store.ErrFull) || !errors.As(err, &full) {
		t.Fatalf("want a *store.FullError, got %v", err)
	}
	return full
}

// At the cap a new key is refused with ErrFull, saying how full; the keys
// held keep deciding, and a return on a key not held is no refusal.
func TestMemoryFullRefusesNewKeys(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m := store.NewMemoryWith(clk, store.MemoryOptions{MaxKeys: 3})
	defer m.Close()
	r := memoryRule(t)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := m.Check(ctx, r, k, 1); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	_, err := m.Check(ctx, r, "d", 1)
	if full := fullError(t, err); full.Keys != 3 || full.Max != 3 || !strings.Contains(err.Error(), "the cap is 3") {
		t.Errorf("refusal %+v: %v", full, err)
	}
	if d, err := m.Check(ctx, r, "a", 1); err != nil || !d.Allowed {
		t.Errorf("a key held: %+v, %v", d, err)
	}
	leases, err := m.Acquire(ctx, []store.AcquireRequest{{Rule: r, Key: "b", Node: "n1", Want: 2}})
	if err != nil || leases[0].Granted != 2 {
		t.Errorf("Acquire on a key held: %+v, %v", leases, err)
	}
	_, err = m.Acquire(ctx, []store.AcquireRequest{
		{Rule: r, Key: "c", Node: "n1", Want: 1}, {Rule: r, Key: "e", Node: "n1", Want: 1},
	})
	if full := fullError(t, err); full.Request != 1 {
		t.Errorf("the refusal names request %d, want 1", full.Request)
	}
	if err := m.Release(ctx, []store.Return{{Rule: r, Key: "f", Node: "n1", Tokens: 1}, {Rule: r, Key: "b", Node: "n1", Tokens: 2}}); err != nil {
		t.Errorf("Release at the cap: %v", err)
	}
	if m.Keys() != 3 || m.Len() != 3 || m.Refused() != 2 || m.MaxKeys() != 3 {
		t.Errorf("keys %d (counted %d), refused %d, cap %d; want 3, 3, 2, 3", m.Keys(), m.Len(), m.Refused(), m.MaxKeys())
	}
}

// Keys that have expired make room, without waiting for the sweeper: a key
// of another shard as well as a key that comes back.
func TestMemoryFullExpiredKeysMakeRoom(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m := store.NewMemoryWith(clk, store.MemoryOptions{MaxKeys: 3})
	defer m.Close()
	r := memoryRule(t)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := m.Check(ctx, r, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute) // every state has reset by itself
	if _, err := m.Check(ctx, r, "a", 1); err != nil {
		t.Fatalf("a key that comes back: %v", err)
	}
	for _, k := range []string{"d", "e"} {
		if _, err := m.Check(ctx, r, k, 1); err != nil {
			t.Fatalf("%s after the others expired: %v", k, err)
		}
	}
	if _, err := m.Check(ctx, r, "f", 1); !errors.Is(err, store.ErrFull) {
		t.Errorf("f with 3 live keys: %v, want ErrFull", err)
	}
	if m.Keys() != 3 || m.Len() != 3 {
		t.Errorf("keys %d, counted %d; want 3", m.Keys(), m.Len())
	}
}

// Under concurrent new keys the cap holds exactly and the count stays
// true.
func TestMemoryFullConcurrent(t *testing.T) {
	ctx := context.Background()
	m := store.NewMemoryWith(clock.Real(), store.MemoryOptions{MaxKeys: 100})
	defer m.Close()
	r := memoryRule(t)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if _, err := m.Check(ctx, r, fmt.Sprintf("g%d-%d", g, i), 1); errors.Is(err, store.ErrFull) {
					refused.Add(1)
				} else if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if m.Keys() != 100 || m.Len() != 100 || refused.Load() != 300 || m.Refused() != 300 {
		t.Errorf("keys %d (counted %d), refused %d (store says %d); want 100, 100, 300", m.Keys(), m.Len(), refused.Load(), m.Refused())
	}
}

// The sweeper keeps the count true.
func TestMemorySweepCounts(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m := store.NewMemory(clk)
	defer m.Close()
	r := memoryRule(t)
	for i := range 10 {
		if _, err := m.Check(context.Background(), r, fmt.Sprint(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	m.Sweep()
	if m.Keys() != 0 || m.Len() != 0 || m.MaxKeys() != store.DefaultMemoryMaxKeys {
		t.Errorf("after a sweep: keys %d, counted %d, cap %d", m.Keys(), m.Len(), m.MaxKeys())
	}
}
