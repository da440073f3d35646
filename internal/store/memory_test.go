package store_test

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
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
		Advance:  func(t *testing.T, d time.Duration) { clk.Advance(d) },
		StepBack: func(t *testing.T, d time.Duration) { clk.Advance(-d) },
	})
}
