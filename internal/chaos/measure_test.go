package chaos

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/rules"
)

// The instrument itself, on made-up timelines: a suite whose bounds could
// not fail would prove nothing.
func TestMeasureFindsOverAdmission(t *testing.T) {
	set, err := rules.Parse("t", []byte("rules:\n"+tokenBucket(openRule, "open")))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := set.Get(openRule)
	fill := func(perBin int64) *measure {
		m := newMeasure(r, 4*time.Second, nodes)
		m.start = time.Unix(0, 0)
		for i := range m.admitted {
			m.admitted[i].Store(perBin)
		}
		return m
	}
	// 2000/s exactly, burst 200, ttl 1s: within every bound.
	if b := fill(200).bounds(0); b.over > 0 || b.worstRatio > 1 {
		t.Errorf("the rate itself: %.0f over, worst ratio %.3f, worst 1s %d of %.0f", b.over, b.worstRatio, b.worst1s, b.bound1s)
	}
	// A second of 2600 breaks the 1s bound, burst + 1.1·rate = 2400.
	m := fill(200)
	for i := 10; i < 20; i++ {
		m.admitted[i].Store(260)
	}
	if b := m.bounds(0); b.over != 200 || b.overSpan != time.Second {
		t.Errorf("a second of 2600 is %.0f over in a %v window, want 200 over the 1s bound of %.0f", b.over, b.overSpan, b.bound1s)
	}
	// 2.5 times the rate for the whole run breaks the long bound, and an
	// allowance as large as the excess makes up for it.
	b := fill(500).bounds(0)
	if b.over <= 0 || b.worstRatio <= 1 {
		t.Errorf("5000/s for 4s passes burst + rate·(T + ttl): %.0f over, ratio %.3f", b.over, b.worstRatio)
	}
	if b := fill(500).bounds(20000); b.over > 0 || b.worstRatio <= 1 {
		t.Errorf("an allowance of 20000: %.0f over, ratio %.3f; want within the allowance, above the bound", b.over, b.worstRatio)
	}
}

func TestMeasureBackOnLeases(t *testing.T) {
	set, _ := rules.Parse("t", []byte("rules:\n"+tokenBucket(openRule, "open")))
	r, _ := set.Get(openRule)
	m := newMeasure(r, 4*time.Second, nodes)
	m.start = time.Unix(0, 0)
	m.faultEnd = m.start.Add(time.Second)
	for i := 5; i < 13; i++ { // fallback until 1.3s
		m.fallback[i].Store(3)
	}
	if got := m.backOnLeases(); got != 300*time.Millisecond {
		t.Errorf("back on leases %v after a fault ending at 1s and fallback until 1.3s, want 300ms", got)
	}
	m.fallback[20].Store(1) // then one every second: never a clean one
	m.fallback[30].Store(1)
	if got := m.backOnLeases(); got != never {
		t.Errorf("back on leases %v, want never", got)
	}
}

func TestWindowCountNeverGoesBack(t *testing.T) {
	clk := &steppedClock{}
	w := newWindowCount(time.Second, clk.Now)
	first := w.at()
	w.count(client.ModeLease, first, first)
	clk.Step(-1500 * time.Millisecond)
	if at := w.at(); at != first {
		t.Fatalf("window %d after the clock stepped back, want %d: a window reopened", at, first)
	}
	w.count(client.ModeFallback, first, first)
	w.count(client.ModeLease, first, first+1)
	if win, leased, fb, unsure := w.fullest(); win != first || leased != 1 || fb != 1 || unsure != 1 {
		t.Errorf("fullest: window %d, %d leased, %d fallback, %d unsure; want %d, 1, 1, 1", win, leased, fb, unsure, first)
	}
}
