package lease

import (
	"fmt"
	"testing"
	"time"
)

// A key with nothing due costs the loop nothing: once 1,000 leased keys go
// quiet (their shares given back), the loop does not wake until the first
// of them is due for its idle check, and then they leave. Before, the
// sweep visited every key every 20ms, due or not.
func TestQuietKeysCostNothing(t *testing.T) {
	f := newFixture(t)
	tb := f.table("day")
	for i := range 1000 {
		tb.Pool(fmt.Sprintf("k%d", i)).Take(1)
	}
	f.step(100*time.Millisecond, 10*time.Millisecond) // leases, then shares given back
	f.settle()
	if n := len(f.m.sharing); n != 0 {
		t.Fatalf("%d keys still visited every sweep after going quiet", n)
	}
	wake, ok := f.m.nextWake()
	if !ok || wake.Sub(f.m.now()) < 300*time.Millisecond {
		t.Fatalf("the loop wakes in %v with nothing due, want not before the idle checks (TTL/2 = 500ms after the keys' last use)", wake.Sub(f.m.now()))
	}
	f.step(time.Second, 50*time.Millisecond)
	if n := tb.Len(); n != 0 {
		t.Fatalf("%d keys left a second after going quiet, want all evicted at TTL/2", n)
	}
	if _, ok := f.m.nextWake(); ok {
		t.Fatal("the loop still has a deadline with no key left")
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
