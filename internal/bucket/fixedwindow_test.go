package bucket_test

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
)

func TestFixedWindow(t *testing.T) {
	w, err := bucket.NewFixedWindow(3, time.Second, t0.Add(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	run(t, w, []step{
		{"window aligned to the epoch, not to creation", t0.Add(200 * ms), 1, pass(3, 2, 800*ms), nil},
		{"n>1", t0.Add(300 * ms), 2, pass(3, 0, 700*ms), nil},
		{"limit reached: retry at the window end", t0.Add(400 * ms), 1, refuse(3, 0, 600*ms, 600*ms), nil},
		{"last nanosecond of the window", t1.Add(-1), 1, refuse(3, 0, 1, 1), nil},
		{"new window", t1, 2, pass(3, 1, time.Second), nil},
		{"n>remaining refused, nothing spent", t1.Add(100 * ms), 2, refuse(3, 1, 900*ms, 900*ms), nil},
		{"n=remaining passes", t1.Add(100 * ms), 1, pass(3, 0, 900*ms), nil},
		{"idle windows skipped", t5.Add(500 * ms), 3, pass(3, 0, 500*ms), nil},
	})
}

func TestFixedWindowClockBackwards(t *testing.T) {
	w, err := bucket.NewFixedWindow(3, time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	run(t, w, []step{
		{"in window [t1,t2)", t1.Add(100 * ms), 2, pass(3, 1, 900*ms), nil},
		{"a late caller in [t0,t1) counts in [t1,t2)", t0.Add(900 * ms), 1, pass(3, 0, 1100*ms), nil},
		{"the old window is not reopened", t0.Add(950 * ms), 1, refuse(3, 0, 1050*ms, 1050*ms), nil},
		{"next window as usual", t2, 3, pass(3, 0, time.Second), nil},
	})
}

func TestSlidingLog(t *testing.T) {
	l, err := bucket.NewSlidingLog(3, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	run(t, l, []step{
		{"t0", t0, 1, pass(3, 2, 10*s), nil},
		{"t2, cost 1", t2, 1, pass(3, 1, 10*s), nil},
		{"t4", t4, 1, pass(3, 0, 10*s), nil},
		{"full: retry when t0's token leaves", t5, 1, refuse(3, 0, 5*s, 9*s), nil},
		{"a cost of 2 waits for t2's too", t5, 2, refuse(3, 0, 7*s, 9*s), nil},
		{"a nanosecond early", t0.Add(10*s - 1), 1, refuse(3, 0, 1, 4*s+1), nil},
		{"t0's token left at t0+10s exactly", t0.Add(10 * s), 1, pass(3, 0, 10*s), nil},
		{"cost 3 needs the log empty", t0.Add(11 * s), 3, refuse(3, 0, 9*s, 9*s), nil},
		{"it is empty at t0+20s", t0.Add(20 * s), 3, pass(3, 0, 10*s), nil},
		{"one entry of cost 3 leaves at once", t0.Add(30*s - 1), 1, refuse(3, 0, 1, 1), nil},
		{"and frees all three", t0.Add(30 * s), 3, pass(3, 0, 10*s), nil},
	})
}

func TestSlidingLogClockBackwards(t *testing.T) {
	l, err := bucket.NewSlidingLog(2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	run(t, l, []step{
		{"t5", t5, 1, pass(2, 1, 10*s), nil},
		{"a late caller at t3 is logged at t5", t3, 1, pass(2, 0, 12*s), nil},
		{"both leave at t15", t0.Add(15*s - 1), 1, refuse(2, 0, 1, 1), nil},
		{"not at t13", t0.Add(13 * s), 1, refuse(2, 0, 2*s, 2*s), nil},
		{"at t15", t0.Add(15 * s), 2, pass(2, 0, 10*s), nil},
	})
}

// The log grows with admissions but holds at most limit entries; memory
// stays bounded however long it runs.
func TestSlidingLogHoldsExactlyLimitInEverySpan(t *testing.T) {
	const limit, window = 50, 100
	l, err := bucket.NewSlidingLog(limit, window*time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	var admitted []int64 // instants, ns after t0
	for at := int64(0); at < 20*window; at++ {
		if l.Allow(t0.Add(time.Duration(at))) {
			admitted = append(admitted, at)
		}
		if at%7 == 0 && l.Allow(t0.Add(time.Duration(at))) { // two at one instant
			admitted = append(admitted, at)
		}
	}
	// Every span of window ns holds at most limit, and the log keeps the
	// pace: limit per window once the first window filled up.
	for i := limit; i < len(admitted); i++ {
		if admitted[i]-admitted[i-limit] < window {
			t.Fatalf("%d admissions within %d ns: %v", limit+1, admitted[i]-admitted[i-limit], admitted[i-limit:i+1])
		}
	}
	if want := 20 * limit; len(admitted) != want {
		t.Errorf("admitted %d in 20 windows, want %d", len(admitted), want)
	}
}
