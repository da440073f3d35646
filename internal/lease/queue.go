package lease

import (
	"container/heap"
	"sync"
)

// deadlines holds keys with something due at an instant, earliest first:
// the next request of a key (a short grant's retry, a share's renewal), or
// the next time its bookkeeping needs the loop (a lease that ends, an idle
// check). A key has at most one live entry in each queue: pushing it
// again leaves the older entries stale, and they are skipped.
type deadlines struct {
	items deadlineHeap
	seq   func(*KeyLease) *uint32 // the key's live entry in this queue
}

type deadline struct {
	at  mono
	p   *KeyLease
	seq uint32
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = deadline{}
	*h = old[:len(old)-1]
	// A queue that held many keys and now holds few gives its array back
	// (a node whose keys went idle would otherwise keep its peak).
	if n := len(*h); cap(old) > minQueueCap && n < cap(old)/4 {
		*h = append(make(deadlineHeap, 0, 2*n), *h...)
	}
	return x
}

// minQueueCap is the array a queue keeps however few keys it holds.
const minQueueCap = 64

func (q *deadlines) push(p *KeyLease, at mono) {
	s := q.seq(p)
	*s++
	if len(q.items) == cap(q.items) && len(q.items) >= minQueueCap {
		q.compact()
	}
	heap.Push(&q.items, deadline{at: at, p: p, seq: *s})
}

// compact drops every stale entry, not only those at the top: a key that
// left, or whose deadline moved, leaves an entry that would otherwise keep
// its key alive until the entry's instant came. It runs when the array is
// full, before it would grow, so the queue never holds more than twice its
// live entries for long, at an amortized O(1) a push.
func (q *deadlines) compact() {
	live := q.items[:0]
	for _, d := range q.items {
		if d.seq == *q.seq(d.p) {
			live = append(live, d)
		}
	}
	// A new array of twice the live entries: the next compaction is at least
	// as many pushes away, and what the stale ones held is let go.
	q.items = append(make(deadlineHeap, 0, max(2*len(live), minQueueCap)), live...)
	heap.Init(&q.items)
}

// cancel makes the key's live entry stale.
func (q *deadlines) cancel(p *KeyLease) { *q.seq(p)++ }

// dropStale pops the stale entries at the top.
func (q *deadlines) dropStale() {
	for len(q.items) > 0 && q.items[0].seq != *q.seq(q.items[0].p) {
		heap.Pop(&q.items)
	}
}

func (q *deadlines) peek() (mono, bool) {
	q.dropStale()
	if len(q.items) == 0 {
		return 0, false
	}
	return q.items[0].at, true
}

func (q *deadlines) popDue(now mono) (*KeyLease, bool) {
	q.dropStale()
	if len(q.items) == 0 || q.items[0].at.After(now) {
		return nil, false
	}
	return heap.Pop(&q.items).(deadline).p, true
}

// inbox carries the hot path's refill requests to the loop. It never
// blocks and never drops one: a request that found the loop busy waits in
// the list (one entry per key at most: WantRefill marks the key queued).
// It also carries the keys that began to spend since their last request
// (bitSpent), for the Core to note when (Core.spent).
type inbox struct {
	mu          sync.Mutex
	keys, spent []*KeyLease
	wake        chan struct{} // holds a value while keys is not empty
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

func (b *inbox) put(p *KeyLease) {
	b.mu.Lock()
	b.keys = append(b.keys, p)
	b.mu.Unlock()
	b.signal()
}

// putSpent wakes nobody: the next Turn, whenever it comes, notes the
// spending no earlier than it happened.
func (b *inbox) putSpent(p *KeyLease) {
	b.mu.Lock()
	b.spent = append(b.spent, p)
	b.mu.Unlock()
}

func (b *inbox) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take empties the lists.
func (b *inbox) take() (keys, spent []*KeyLease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys, spent = b.keys, b.spent
	b.keys, b.spent = nil, nil
	return keys, spent
}

// len counts the refill requests: a spending noted waits for a Turn that
// comes for another reason.
func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}
