package lease

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/store"
)

// What a new key's fallback share admitted while its first request was on
// its way, beyond what the lease paid, is owed, but for what the share
// earned while the central bucket was full (refill the bucket lost) and on
// the way back (the bucket stopped earning the rate it lent). The request
// is applied as it leaves and answered 200ms later, but the node cannot
// tell that from a request that arrived just before its answer: it keeps
// the least either way.
func TestInFlightFallbackKeepsWhatAFullBucketLost(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rule        string
		emptiedLead time.Duration // 0: the bucket is full when the request arrives
		granted     int64
		left        int64 // of the lease's tokens, once the flight is paid
		owedMin     float64
		owedMax     float64
	}{
		// Full for a TTL: the whole flight's 200 kept, the lease pays the
		// other 100 of the 300 admitted and keeps 100, nothing owed.
		{"bucket full on arrival", "deep", 0, 200, 100, 0, 2},
		// Emptied (another node took 1000) 100ms before: below capacity
		// for the last 100ms before arrival, as it may all have been in
		// flight; 99 kept, the lease's 50 (half of the ~100 refilled, the
		// other holder's fair share kept) pay, 151 owed.
		{"bucket emptied 100ms before", "deep", 100 * time.Millisecond, 50, 0, 148, 154},
		// Emptied (another node took 100) 150ms before, full again 50ms
		// before: 100 kept, 50 paid, 150 owed.
		{"bucket emptied 150ms before and full again", "far", 150 * time.Millisecond, 50, 0, 146, 154},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFarFixture(t, 200*time.Millisecond, nil)
			r, _ := f.set.Get(tc.rule)
			if tc.emptiedLead > 0 {
				if _, err := f.st.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "n0", Want: r.Burst}}); err != nil {
					t.Fatal(err)
				}
				f.clk.Advance(tc.emptiedLead)
			}
			p := f.table(tc.rule).Pool("k")
			f.step(2*time.Millisecond, time.Millisecond) // the first request is applied as it leaves
			if len(f.far.waiting) != 1 {
				t.Fatalf("%d requests on their way, want 1", len(f.far.waiting))
			}
			p.Consumed(300) // the share's burst and its rate over the flight, and more
			for i := 0; !p.Served() && i < 300; i++ {
				f.step(time.Millisecond, time.Millisecond)
			}
			if !p.Served() {
				t.Fatal("no answer 300ms after the request left")
			}
			// The share's rate is 1000/s, N is 1.
			f.tr.mu.Lock()
			grants := append([]Grant(nil), f.tr.lastGrants...)
			f.tr.mu.Unlock()
			if len(grants) != 1 || grants[0].Granted != tc.granted {
				t.Fatalf("grants %+v, want one of %d tokens", grants, tc.granted)
			}
			if got := p.Tokens(); got < tc.left || got > tc.left+1 {
				t.Fatalf("%d of the lease's tokens left once the flight was paid, want %d", got, tc.left)
			}
			var accrued float64
			if b := p.own.busy; b != nil {
				accrued = b.accrued
			}
			owed := -accrued
			if owed < tc.owedMin || owed > tc.owedMax {
				t.Fatalf("owed %.1f after 300 admitted in flight (a lease of %d), want %.0f to %.0f", owed, tc.granted, tc.owedMin, tc.owedMax)
			}
		})
	}
}

func TestKeptInFlight(t *testing.T) {
	const fb = 100.0 // the fallback share's rate, tokens/s
	ttl := 2 * time.Second
	for _, tc := range []struct {
		name   string
		flight time.Duration
		g      Grant
		want   float64
	}{
		{"nothing known (an older allocator)", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb}, 0},
		{"full for a TTL, the share lent back", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb, FullFor: ttl, FullInTTL: ttl}, 20},
		// Arrived at once, it would have lent only half a share back.
		{"full for a TTL, half a share lent", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb / 2, FullFor: ttl, FullInTTL: ttl}, 10},
		// Below capacity for 50ms of the TTL, all of it maybe in flight.
		{"below for 50ms", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb, FullInTTL: ttl - 50*time.Millisecond}, 15},
		{"below for 50ms, full for the last 100ms", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb, FullFor: 100 * time.Millisecond, FullInTTL: ttl - 50*time.Millisecond}, 15},
		{"below for 50ms, full for the last 180ms", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb, FullFor: 180 * time.Millisecond, FullInTTL: ttl - 50*time.Millisecond}, 18},
		// Below capacity for the 100ms before arrival, half a share lent
		// back: arrived 100ms after it left, it would keep 10 on the way
		// back and nothing before.
		{"below for 100ms, half a share lent", 200 * time.Millisecond, Grant{TTL: ttl, Rate: fb / 2, FullInTTL: ttl - 100*time.Millisecond}, 5},
		// A flight longer than the TTL: nothing is known before the TTL,
		// and the rate was lent for a TTL only.
		{"a 3s flight, full for the TTL", 3 * time.Second, Grant{TTL: ttl, Rate: fb, FullFor: ttl, FullInTTL: ttl}, 200},
		{"a 3s flight, full for the TTL, half a share lent", 3 * time.Second, Grant{TTL: ttl, Rate: fb / 2, FullFor: ttl, FullInTTL: ttl}, 100},
		{"a negative flight (a clock gone wrong)", -time.Second, Grant{TTL: ttl, Rate: fb, FullFor: ttl, FullInTTL: ttl}, 0},
	} {
		if got := keptInFlight(tc.flight, tc.g, fb); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: kept %.3f, want %.3f", tc.name, got, tc.want)
		}
	}
}
