package clock

import (
	"testing"
	"time"
)

func TestFakeTimerFiresOnlyWhenDue(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	f := NewFake(start)
	tm := f.NewTimer(100 * time.Millisecond)
	f.Advance(99 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("timer fired 1ms early")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-tm.C():
		if want := start.Add(100 * time.Millisecond); !got.Equal(want) {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	default:
		t.Fatal("timer did not fire when due")
	}
	if f.Timers() != 0 {
		t.Fatalf("Timers() = %d after firing, want 0", f.Timers())
	}
}

func TestFakeTimerStopAndReset(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	if tm.Stop() {
		t.Fatal("second Stop returned true")
	}
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	tm.Reset(time.Second)
	f.Advance(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("reset timer did not fire")
	}
}

func TestFakeWaitTimers(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm := f.NewTimer(time.Minute)
		<-tm.C()
	}()
	if !f.WaitTimers(1, 5*time.Second) {
		t.Fatal("goroutine never armed its timer")
	}
	f.Advance(time.Minute)
	<-done
}
