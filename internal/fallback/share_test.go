package fallback

import (
	"math"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// TestShareAtExtremes: the share's rate is limit per period×N, and a
// year-long period over a few hundred nodes is more than a time.Duration
// holds (~292 years). The share must still hold burst/N and refill at
// rate/N, whatever N.
func TestShareAtExtremes(t *testing.T) {
	r := rule(t, rules.MaxLimit, rules.MaxLimit, rules.MaxPeriod)
	t0 := time.Unix(1_800_000_000, 0)
	const month = 30 * 24 * time.Hour
	for _, nodes := range []int{1, 291, 292, 1000, 10_000, 1 << 20, math.MaxInt32} {
		var s Share
		capacity := r.Burst / int64(nodes)
		if d := s.AllowN(r, nodes, t0, capacity); !d.Allowed {
			t.Errorf("%d nodes: burst/N = %d refused: %+v", nodes, capacity, d)
			continue
		}
		if s.AllowN(r, nodes, t0, 1).Allowed {
			t.Errorf("%d nodes: a token past burst/N = %d admitted", nodes, capacity)
			continue
		}
		want := float64(r.Limit) * float64(month) / (float64(r.Period) * float64(nodes))
		got := int64(0)
		if d := s.AllowN(r, nodes, t0.Add(month), 1); d.Allowed {
			got = d.Remaining + 1
		}
		if float64(got) > want+1 || float64(got) < want*(1-1e-9)-1 {
			t.Errorf("%d nodes: %d tokens refilled in 30 days, want rate/N × 30 days = %.0f", nodes, got, want)
		}
	}
}

// TestShareRateSaturates: period×N past the longest Duration saturates the
// period and scales the tokens down with it, so the rate never grows.
func TestShareRateSaturates(t *testing.T) {
	cases := []struct {
		limit   int64
		period  time.Duration
		nodes   int
		tokens  int64
		per     time.Duration
		comment string
	}{
		{1000, time.Minute, 4, 1000, 4 * time.Minute, "exact"},
		{1000, time.Minute, 0, 1000, time.Minute, "no fleet counts as one node"},
		{7, rules.MaxPeriod, 291, 7, rules.MaxPeriod * 291, "just fits"},
		{1 << 40, rules.MaxPeriod, 1 << 20, 305_840_371, math.MaxInt64, "scaled down"},
		{1, rules.MaxPeriod, 1 << 20, 1, math.MaxInt64, "at least one token"},
		{1 << 40, math.MaxInt64, math.MaxInt, 1, math.MaxInt64, "both at their largest"},
	}
	for _, c := range cases {
		tokens, per := shareRate(c.limit, c.period, c.nodes)
		if tokens != c.tokens || per != c.per {
			t.Errorf("%s: shareRate(%d, %v, %d) = %d per %v, want %d per %v",
				c.comment, c.limit, c.period, c.nodes, tokens, per, c.tokens, c.per)
		}
	}
}

// TestSharesKeepSlowRefills: a share is kept while its bucket could still be
// refilling, even when that time is longer than a Duration holds; a fresh,
// full share would admit what the kept one would not.
func TestSharesKeepSlowRefills(t *testing.T) {
	r := rule(t, 1, rules.MaxLimit, rules.MaxPeriod)
	var s Shares
	t0 := time.Unix(1_800_000_000, 0)
	a := s.Get(r, "a", t0)
	s.Get(r, "b", t0.Add(2*time.Minute))
	if s.Len() != 2 || s.Get(r, "a", t0.Add(2*time.Minute)) != a {
		t.Fatalf("a share of 1 token a year, burst %d, forgotten after 2 minutes idle", r.Burst)
	}
}

// TestShareFull: a share is full when a fresh one would decide as it does:
// never used, or refilled to its whole burst/N.
func TestShareFull(t *testing.T) {
	r := rule(t, 10, 10, time.Second) // 5 tokens a node at 2 nodes, 5/s
	t0 := time.Unix(1_800_000_000, 0)
	var s Share
	if !s.Full(t0) {
		t.Error("a share never used is not full")
	}
	if d := s.AllowN(r, 2, t0, 2); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("2 of 5: %+v", d)
	}
	if s.Full(t0.Add(399 * time.Millisecond)) {
		t.Error("full with 4.99 of 5 tokens")
	}
	if !s.Full(t0.Add(400 * time.Millisecond)) {
		t.Error("not full with 5 of 5 tokens")
	}
}
