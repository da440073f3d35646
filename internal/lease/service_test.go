package lease

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A key with nothing due costs the loop nothing: 1,000 keys touched once
// each hold the share their first lease brought, asleep out of the sweep
// (sleep.go), renew it once, let it lapse (they are its only holders and
// were asked nothing since) and leave at their idle check; then the loop
// has nothing left to visit and no deadline. Before, the sweep visited every key every 20ms,
// due or not, and each renewed its lease until found idle.
func TestQuietKeysCostNothing(t *testing.T) {
	f := newFixture(t)
	tb := f.table("day")
	pools := make([]*Pool, 1000)
	for i := range pools {
		pools[i] = tb.Pool(fmt.Sprintf("k%d", i))
		pools[i].Take(1)
	}
	f.step(100*time.Millisecond, 10*time.Millisecond)
	sharing := 0
	for _, p := range pools {
		if p.Sharing() {
			sharing++
		}
	}
	if sharing == 0 {
		t.Fatal("no key holds a share after its first lease: the test no longer tests the lapse")
	}
	if n := f.m.sharing.len(); n != 0 {
		t.Fatalf("%d quiet keys visited every sweep, want their shares asleep (sleep.go)", n)
	}
	f.step(2*time.Second, 50*time.Millisecond)
	if n := tb.Len(); n != 0 {
		t.Fatalf("%d keys left 2s after going quiet, want all evicted at their idle check", n)
	}
	if n := f.m.sharing.len(); n != 0 {
		t.Fatalf("%d keys still visited every sweep after they left", n)
	}
	if _, ok := f.m.nextWake(); ok {
		t.Fatal("the loop still has a deadline with no key left")
	}
	sent := 0
	for _, n := range f.tr.calls() {
		sent += n
	}
	if sent != 2000 {
		t.Fatalf("%d key requests for 1,000 keys touched once, want 2,000 (the first and one renewal each): a quiet sole holder lets its share lapse", sent)
	}
}

// The key map gives its buckets back when most keys leave.
func TestKeyMapShrinks(t *testing.T) {
	m := newKeyMap()
	pools := make([]*Pool, 100_000)
	for i := range pools {
		pools[i] = &Pool{key: fmt.Sprint(i)}
		m.loadOrStore(pools[i].key, pools[i])
	}
	grown := len(m.table.Load().buckets)
	for _, p := range pools {
		m.remove(p.key, p)
	}
	if n := len(m.table.Load().buckets); n != initialBuckets || m.len() != 0 {
		t.Fatalf("%d buckets and %d keys after all of 100,000 left (%d at the peak), want %d and 0", n, m.len(), grown, initialBuckets)
	}
}

// A key touched once costs two lease requests (its first, with the node's
// part of the rate, and one renewal before its share lapses) and a Release,
// each shared with the other keys touched meanwhile; it leaves once idle,
// while its lease still holds what it gives back.
func TestKeyTouchedOnceCostsTwoRequestsAndOneRelease(t *testing.T) {
	f := newFixture(t)
	tb := f.table("day") // lease 100, ttl 1s
	const keys = 1000
	for i := range keys {
		p := tb.Pool(fmt.Sprintf("k%d", i))
		p.Consumed(1) // admitted on its fallback share while the lease is on its way
	}
	f.step(2*time.Second, 10*time.Millisecond)
	f.settle()
	items := 0
	for _, n := range f.tr.calls() {
		items += n
	}
	if items != 2*keys {
		t.Fatalf("%d lease requests for %d keys touched once (calls %v), want two each", items, keys, f.tr.calls())
	}
	if got := f.tr.releaseCalls.Load(); got > 3 {
		t.Fatalf("%d Release calls, want the keys' returns shared in a few", got)
	}
	if got, want := atomic.LoadInt64(&f.tr.released), int64(keys*100); got != want {
		t.Fatalf("released %d tokens, want %d: each key's whole lease (its one token was reported with its request)", got, want)
	}
	if n := tb.Len(); n != 0 {
		t.Fatalf("%d keys left 2s after their only use", n)
	}
}

// A node never has more than MaxInFlight Acquire calls out: a flood of new
// keys waits for answers and goes out in full calls, instead of calls the
// allocator would shed or time out.
func TestAcquireCallsInFlightAreBounded(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.MaxInFlight = 2; c.MaxBatch = 100 })
	release := make(chan struct{})
	var inFlight, most atomic.Int32
	f.tr.during = func() {
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
	}
	tb := f.table("day")
	for i := range 1000 {
		tb.Pool(fmt.Sprintf("k%d", i))
	}
	// The clock moves until two calls are out: keys still in the loop's inbox
	// at one advance are batched at a later instant.
	waitFor(t, func() bool { f.clk.Advance(time.Millisecond); return inFlight.Load() == 2 })
	time.Sleep(20 * time.Millisecond) // no third call may leave
	if got := most.Load(); got != 2 {
		t.Fatalf("%d calls in flight, want at most 2", got)
	}
	close(release)
	f.step(100*time.Millisecond, time.Millisecond)
	items := 0
	for _, n := range f.tr.calls() {
		items += n
		if n > 100 {
			t.Fatalf("a call of %d keys, more than MaxBatch", n)
		}
	}
	// The first 1,000 items are the keys' first requests, in full calls;
	// renewals of the first leases may follow (the clock moved on).
	calls := f.tr.calls()
	full := len(calls) >= 10
	for i := 0; full && i < 10; i++ {
		full = calls[i] == 100
	}
	if !full || items < 1000 || most.Load() != 2 {
		t.Fatalf("%d keys asked in calls %v (most in flight %d), want all 1000 in full calls first, 2 at a time", items, calls, most.Load())
	}
}

// A failed call is not sent again for keys that have gone quiet: keys
// touched once while the allocator is down stop asking, and leave, instead
// of being retried until it answers.
func TestFailedCallsAreNotRetriedForQuietKeys(t *testing.T) {
	f := newFixture(t)
	var attempts atomic.Int64
	f.tr.during = func() { attempts.Add(1) }
	f.tr.down.Store(true)
	tb := f.table("day")
	for i := range 100 {
		tb.Pool(fmt.Sprintf("k%d", i))
	}
	f.step(3*time.Second, 10*time.Millisecond)
	if n := tb.Len(); n != 0 {
		t.Fatalf("%d keys still held 3s after their only request failed", n)
	}
	before := len(f.tr.calls())
	f.step(2*time.Second, 10*time.Millisecond)
	if got := len(f.tr.calls()); got != before {
		t.Fatalf("%d calls after the keys left", got-before)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
