package lease

import (
	"fmt"
	"testing"
	"time"
)

// Keys that are their shares' only holders and go quiet leave the tick: a
// node holding 200 of them sweeps none, while each still holds its share.
// A Take wakes its key's share, which earns again from then on; a Take
// refused on an empty pool wakes it too.
func TestQuietSoleSharesSleepOutOfTheTick(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	tb := f.table("far")
	pools := make([]*Pool, 200)
	for i := range pools {
		pools[i] = tb.Pool(fmt.Sprintf("k%d", i))
	}
	for range 20 { // busy for 100ms: each key gets a share
		for _, p := range pools {
			p.Take(1)
		}
		f.step(5*time.Millisecond, 5*time.Millisecond)
	}
	for i, p := range pools {
		if !p.Sharing() {
			t.Fatalf("key %d holds no share while busy", i)
		}
	}
	f.step(100*time.Millisecond, 5*time.Millisecond) // quiet for a few sweeps
	if n := f.m.sharing.len(); n != 0 {
		t.Fatalf("%d quiet keys still visited every sweep", n)
	}
	for i, p := range pools {
		if !p.Sharing() {
			t.Fatalf("key %d lost its share asleep", i)
		}
	}

	q := pools[1]
	if !q.own.asleep {
		t.Fatal("a quiet key's share is awake")
	}
	if _, ok := q.Take(q.Tokens() + 1); ok {
		t.Fatal("took more than the pool held")
	}
	f.settle()
	if !f.m.sharing.has(q) {
		t.Fatal("a refused Take did not wake the key's share")
	}

	p := pools[0]
	p.Take(1)
	f.settle()
	if !f.m.sharing.has(p) {
		t.Fatal("a Take did not wake the key's share")
	}
}

// A key with other holders does not sleep: only the tick sees it go quiet
// and gives its share back within a few sweeps (TestShareGivenBackWhenQuiet).
func TestSharedKeysStayInTheTick(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	r, _ := f.set.Get("far")
	f.tr.acquireAs(t, "n2", r, "k", 1)
	p := f.table("far").Pool("k")
	f.drive(p, 500, 300*time.Millisecond)
	if p.Holders() < 2 || !p.Sharing() {
		t.Fatalf("%d holders, sharing %v: want a share of a key held by two nodes", p.Holders(), p.Sharing())
	}
	if p.own.asleep {
		t.Fatal("a shared key's share sleeps while busy")
	}
}

// A quiet key with other holders sleeps out of the tick too, and still
// gives its share back once it is quiet: the sleep ends then.
func TestSharesWithOtherHoldersSleepUntilTheyGiveBack(t *testing.T) {
	f := newFarFixture(t, 0, nil)
	r, _ := f.set.Get("far")
	f.tr.acquireAs(t, "n2", r, "k", 1) // another holder, to give it back to
	p := f.table("far").Pool("k")
	p.Refused(1)
	p.Refused(1) // busy before its first request: it asks for a share
	f.drive(p, 5, time.Second)
	if !p.Sharing() || p.Holders() < 2 {
		t.Fatalf("sharing %v with %d holders, want a share held with another node", p.Sharing(), p.Holders())
	}
	// Out of the tick within a few sweeps of its last request, its share
	// still held. (drive delivers the allocator's answers; a renewal on its
	// way keeps the key in the tick until it is back.)
	slept := false
	for waited := time.Duration(0); !slept && waited < 300*time.Millisecond; waited += 5 * time.Millisecond {
		f.drive(p, 0, 5*time.Millisecond)
		slept = !f.m.sharing.has(p) && p.Sharing()
	}
	if !slept {
		t.Fatal("the quiet key stayed in the tick, or lost its share, over 300ms")
	}
	// Quiet is three of its inter-arrival times, at most half a TTL (its
	// rate estimate falls while it is quiet): the share goes back then, or
	// after the renewal on its way then.
	for waited := time.Duration(0); p.Sharing() && waited < 2*time.Second; waited += 5 * time.Millisecond {
		f.drive(p, 0, 5*time.Millisecond)
	}
	if quiet, within := f.m.now().Sub(p.own.lastActive), r.Lease.TTL/2+r.Lease.Refresh*6/5+100*time.Millisecond; p.Sharing() || quiet > within {
		t.Fatalf("the share went back (%v) %v after the key's last demand, want within %v: half a TTL and a renewal", !p.Sharing(), quiet, within)
	}
	if l := f.tr.acquireAs(t, "n2", r, "k", r.Rate()); l.Rate != r.Rate() {
		t.Fatalf("another node got a share of %g/s after the first went quiet, want the whole %g/s", l.Rate, r.Rate())
	}
}
