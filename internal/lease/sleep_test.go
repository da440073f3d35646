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
