package bucket

import (
	"math"
	"testing"
	"time"
)

// Every rate written as p/q per second with modest p and q is read back
// exactly, whatever the float rounding of p/q.
func TestRateFromFloatFindsTheIntendedFraction(t *testing.T) {
	for q := int64(1); q <= 400; q++ {
		for p := int64(1); p <= 2000; p++ {
			got, ok := rateFromFloat(float64(p) / float64(q))
			g := gcd(p, q*int64(time.Second))
			want := rate{tokens: p / g, per: q * int64(time.Second) / g}
			if !ok || got != want {
				t.Fatalf("rateFromFloat(%d/%d) = %+v, %v; want %+v", p, q, got, ok, want)
			}
		}
	}
}

func TestRateFromFloatEdges(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want rate
		ok   bool
	}{
		{1e12, rate{1000, 1}, true},
		{0.1 + 0.2, rate{3, 10 * int64(time.Second)}, true}, // 0.30000000000000004 means 0.3
		{1.0 / 86400 / 365, rate{1, 365 * 86400 * int64(time.Second)}, true},
		{math.Pi, rate{}, true}, // no small fraction: the closest that fits
		{1e-300, rate{}, false},
		{1e300, rate{}, false},
		{math.SmallestNonzeroFloat64, rate{}, false},
		{math.MaxFloat64, rate{}, false},
	} {
		got, ok := rateFromFloat(c.in)
		if ok != c.ok || (c.want != rate{} && got != c.want) {
			t.Errorf("rateFromFloat(%v) = %+v, %v; want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
		if ok {
			back := float64(got.tokens) / float64(got.per) * float64(time.Second)
			if math.Abs(back-c.in) > 1e-15*c.in {
				t.Errorf("rateFromFloat(%v) = %d/%d ns, which is %v/s", c.in, got.tokens, got.per, back)
			}
		}
	}
}
