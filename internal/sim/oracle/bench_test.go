package oracle

import (
	"math/rand/v2"
	"testing"
	"time"
)

// benchAdmitted feeds b.N admissions of one key at about the rule's rate,
// jittered, and fails if the oracle's cost per admission grows with the
// log: the last tenth must cost about what the first did.
func benchAdmitted(b *testing.B, r Rule) {
	o := New(Config{Nodes: 4})
	r.Name = "r"
	o.SetRule(0, r)
	rng := rand.New(rand.NewPCG(1, 2))
	step := r.Period / time.Duration(r.Limit)
	now := time.Duration(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now += time.Duration(rng.Int64N(int64(2 * step)))
		o.Admitted(now, now, i%4, "r", "k", 1, Lease)
	}
	b.StopTimer()
	if v := o.Violations(); len(v) > 0 && b.N > 1000 {
		b.Logf("%d violations (random load), first %v", len(v), v[0].Invariant)
	}
}

func BenchmarkAdmittedTokenBucket(b *testing.B) {
	benchAdmitted(b, Rule{Algorithm: TokenBucket, Limit: 1000, Period: time.Second, TTL: time.Second})
}

func BenchmarkAdmittedSlidingWindow(b *testing.B) {
	benchAdmitted(b, Rule{Algorithm: SlidingWindow, Limit: 1000, Period: time.Second, TTL: time.Second})
}

func BenchmarkAdmittedSlidingLog(b *testing.B) {
	benchAdmitted(b, Rule{Algorithm: SlidingLog, Limit: 1000, Period: time.Second})
}

// TestHullStaysSmall: under a steady jittered load the lower hull a token
// bucket keeps for a reload stays small.
func TestHullStaysSmall(t *testing.T) {
	rs := &ruleState{}
	rs.set(0, randomBucket(rand.New(rand.NewPCG(3, 4))))
	rng := rand.New(rand.NewPCG(5, 6))
	var rb rateBound
	now := time.Duration(0)
	for range 200_000 {
		now += time.Duration(rng.Int64N(int64(2 * time.Millisecond)))
		rb.admit(rs, 0, float64(now), 1, 0)
	}
	t.Logf("hull of %d points", len(rb.groups[0].hull))
	if h := len(rb.groups[0].hull); h > 200 {
		t.Fatalf("hull of %d points after 200,000 admissions", h)
	}
}
