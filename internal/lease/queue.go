package lease

import (
	"container/heap"
	"time"
)

// delayQueue holds keys whose next request must wait (a short grant's
// retry-after, a share's renewal), earliest first. Only a pool's newest
// entry is live: pushing it again, or scheduling it, leaves the older ones
// stale, and they are skipped.
type delayQueue struct{ items delayHeap }

type delayed struct {
	at  time.Time
	p   *Pool
	seq uint64
}

type delayHeap []delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (q *delayQueue) push(p *Pool, at time.Time) {
	p.own.delaySeq++
	heap.Push(&q.items, delayed{at: at, p: p, seq: p.own.delaySeq})
}

// dropStale pops the stale entries at the top.
func (q *delayQueue) dropStale() {
	for len(q.items) > 0 && q.items[0].seq != q.items[0].p.own.delaySeq {
		heap.Pop(&q.items)
	}
}

func (q *delayQueue) peek() (time.Time, bool) {
	q.dropStale()
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].at, true
}

func (q *delayQueue) popDue(now time.Time) (*Pool, bool) {
	q.dropStale()
	if len(q.items) == 0 || q.items[0].at.After(now) {
		return nil, false
	}
	return heap.Pop(&q.items).(delayed).p, true
}
