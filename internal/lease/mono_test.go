package lease

import (
	"math"
	"testing"
	"time"
)

// mono stands in for time.Time on the manager's time: the same order, the
// zero value long before any reading, and no overflow at the extremes.
func TestMonoActsAsTime(t *testing.T) {
	var zero mono
	t0 := monoAt(0)
	t1 := monoAt(time.Second)
	if !zero.IsZero() || t0.IsZero() || !zero.Before(t0) || !t1.After(t0) || !t1.Equal(t0.Add(time.Second)) {
		t.Fatal("mono's zero is not before the clock's origin, or instants are out of order")
	}
	if d := t1.Sub(t0); d != time.Second {
		t.Fatalf("t1 - t0 = %v, want 1s", d)
	}
	if d := t0.Sub(zero); d < 100*365*24*time.Hour {
		t.Fatalf("the zero instant is %v before the clock's origin, want long ago", d)
	}
	if got := t1.Add(math.MaxInt64); got != math.MaxInt64 {
		t.Fatalf("Add saturates at the far future, got %d", got)
	}
	if got := zero.Add(math.MinInt64).Add(math.MinInt64); got != math.MinInt64 {
		t.Fatalf("Add saturates at the far past, got %d", got)
	}
	if d := mono(math.MaxInt64).Sub(math.MinInt64); d != math.MaxInt64 {
		t.Fatalf("Sub saturates upwards, got %v", d)
	}
	if d := mono(math.MinInt64).Sub(math.MaxInt64); d != math.MinInt64 {
		t.Fatalf("Sub saturates downwards, got %v", d)
	}
	if got, want := t1.time(), time.Unix(1, 0); !got.Equal(want) {
		t.Fatalf("t1 as a time.Time is %v, want %v (the clock's origin at the Unix epoch)", got, want)
	}
}
