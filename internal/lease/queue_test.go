package lease

import (
	"testing"
	"time"
)

func newQueue() *deadlines {
	return &deadlines{seq: func(p *Pool) *uint32 { return &p.own.timerSeq }}
}

// A queue that held many keys gives its array back once they are gone
// (issue 9: the node's heap per idle key was the timers' array, kept at the
// size of the busiest moment).
func TestQueueGivesItsArrayBack(t *testing.T) {
	q := newQueue()
	const n = 100_000
	for i := range n {
		q.push(&Pool{}, mono(i))
	}
	peak := cap(q.items)
	for range n {
		if _, ok := q.popDue(mono(n)); !ok {
			t.Fatal("a due entry was not popped")
		}
	}
	if got := cap(q.items); got > minQueueCap {
		t.Fatalf("an empty queue keeps an array of %d entries (%d at its busiest), want at most %d", got, peak, minQueueCap)
	}
}

// Entries of keys that left are dropped when the array fills, not only
// when their instant comes: they would keep the pools alive until then.
func TestQueueDropsStaleEntriesBeforeGrowing(t *testing.T) {
	q := newQueue()
	const n = 10_000
	far := mono(time.Hour)
	gone := make([]*Pool, n)
	for i := range gone {
		gone[i] = &Pool{}
		q.push(gone[i], far+mono(i))
	}
	for _, p := range gone {
		q.cancel(p) // the key left: its entry is stale
	}
	peak := cap(q.items)
	live := make([]*Pool, 2*n)
	at := map[*Pool]mono{}
	for i := range live {
		live[i] = &Pool{}
		at[live[i]] = mono(2*n - i) // latest first: the heap must reorder them
		q.push(live[i], at[live[i]])
	}
	if got := cap(q.items); got > peak*2 {
		t.Fatalf("the array grew to %d entries for %d live ones (%d stale), want the stale dropped first", got, 2*n, n)
	}
	for _, d := range q.items {
		if d.seq != *q.seq(d.p) {
			t.Fatalf("a stale entry is still in the array after the pushes")
		}
	}
	// Every live entry comes out once, earliest first.
	last := mono(-1)
	for i := range live {
		p, ok := q.popDue(far)
		if !ok {
			t.Fatalf("entry %d of %d missing", i, len(live))
		}
		if at[p] < last {
			t.Fatalf("entry at %d came after one at %d", at[p], last)
		}
		last = at[p]
		delete(at, p)
	}
	if _, ok := q.popDue(2 * far); ok {
		t.Fatal("a stale entry came out")
	}
}
