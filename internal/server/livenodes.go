package server

import (
	"container/list"
	"sync"
	"time"
)

// liveNodes counts the distinct node ids that called Acquire or Release in
// the last liveWindow: the allocator's count of live nodes, which answers
// carry (AcquireResponse.nodes) as a fleet size for the nodes that have no
// other (no gossip, no configured count) to divide their fallback by
// (docs/bounds.md, rule 5). It holds at most maxLive ids and forgets the
// oldest first, so that a flood of fresh ids costs bounded memory; what a
// flood can do is raise the count, which only shrinks the nodes' fallback
// shares. A count is of the calls this allocator saw: with several, each
// knows part of the fleet, and a node takes the largest of its counts.
type liveNodes struct {
	window time.Duration
	max    int
	mu     sync.Mutex
	ids    map[string]*list.Element // of *liveNode
	order  list.List                // most recently seen first
}

type liveNode struct {
	id   string
	seen time.Duration // on the monotonic clock
}

const (
	liveWindow = 30 * time.Second
	maxLive    = 100_000
)

func newLiveNodes(window time.Duration, max int) *liveNodes {
	return &liveNodes{window: window, max: max, ids: make(map[string]*list.Element)}
}

// seen records a call of node at now (monotonic) and returns the count.
func (l *liveNodes) seen(node string, now time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.ids[node]; ok {
		e.Value.(*liveNode).seen = now
		l.order.MoveToFront(e)
	} else {
		l.ids[node] = l.order.PushFront(&liveNode{id: node, seen: now})
	}
	return l.forget(now)
}

// count is the number of live nodes at now.
func (l *liveNodes) count(now time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forget(now)
}

// forget drops the ids not seen within the window, and the oldest beyond
// the cap, and returns how many are left. The caller holds mu.
func (l *liveNodes) forget(now time.Duration) int {
	for e := l.order.Back(); e != nil; e = l.order.Back() {
		n := e.Value.(*liveNode)
		if now-n.seen < l.window && l.order.Len() <= l.max {
			break
		}
		l.order.Remove(e)
		delete(l.ids, n.id)
	}
	return l.order.Len()
}
