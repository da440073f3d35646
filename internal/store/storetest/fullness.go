package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// testBucketFullness: a lease says how long the central bucket had been
// full when the request arrived, and how much of the TTL before, which is
// what a node may keep of what its fallback allowance admitted while the
// request was on its way (lease.Manager.oweInFlight).
func testBucketFullness(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 10)
	ttl := r.Lease.TTL
	if l := acquire(t, s, r, "k", "n1", 4, 0); l.FullFor != ttl || l.FullInTTL != ttl {
		t.Fatalf("a new key's first lease: full for %v, %v of the TTL; want a whole TTL (%v) for both", l.FullFor, l.FullInTTL, ttl)
	}
	h.Advance(t, 10*time.Millisecond)
	l := acquire(t, s, r, "k", "n2", 2, 0)
	if l.FullFor != 0 || l.FullInTTL > ttl-10*time.Millisecond || l.FullInTTL < ttl-250*time.Millisecond {
		t.Fatalf("the next holder's lease 10ms after the first emptied the bucket: full for %v, %v of the TTL; want 0, the TTL less 10ms or a little more", l.FullFor, l.FullInTTL)
	}
	h.Advance(t, ttl)
	if l := acquire(t, s, r, "k", "n3", 1, 0); l.FullFor != 0 || l.FullInTTL != 0 {
		t.Fatalf("a TTL after the bucket was emptied: full for %v, %v of the TTL; want nothing known", l.FullFor, l.FullInTTL)
	}

	// A bucket that fills again says how long by what it could not hold;
	// the 10ms it took count as below capacity.
	fast := rule(t, rules.Rule{Name: "fast", Algorithm: rules.TokenBucket, Limit: 1000, Period: time.Second, Burst: 10})
	acquire(t, s, fast, "k", "n1", 10, 0)
	h.Advance(t, 60*time.Millisecond) // full after 10ms at 1000/s
	l = acquire(t, s, fast, "k", "n1", 10, 0)
	below := fast.Lease.TTL - l.FullInTTL // µs rounding aside, 10ms on any clock
	if l.FullFor < 49*time.Millisecond || l.FullFor > fast.Lease.TTL || below < 9*time.Millisecond || below > 11*time.Millisecond {
		t.Fatalf("a bucket refilled 10ms after it was emptied, asked again 60ms after: full for %v, %v of the TTL; want 50ms or a little more, the TTL less 10ms", l.FullFor, l.FullInTTL)
	}

	// Windows keep no bucket.
	w := windowRule(t, rules.FixedWindow, 10, slow)
	if l := acquire(t, s, w, "k", "n1", 4, 0); l.FullFor != 0 || l.FullInTTL != 0 {
		t.Fatalf("a fixed window's lease: full for %v, %v of the TTL; want nothing", l.FullFor, l.FullInTTL)
	}
}
