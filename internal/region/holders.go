package region

import (
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/store"
)

// A region's count of the nodes that hold each global key, and the last
// answer each was sent, to answer a retry again rather than apply it
// twice. A node holds a key from its request until its lease there ends,
// or it gives the key back.

type lenderID struct{ rule, key string }

// lenders are the global keys some node of the region holds.
type lenders struct {
	mu sync.Mutex
	m  map[lenderID]*lender
}

// lender is one global key's holders in the region.
type lender struct {
	mu    sync.Mutex
	gone  bool // out of the map: look it up again
	nodes map[string]*holder
}

type holder struct {
	until time.Duration // the region's monotonic clock: its lease's end here
	seq   int64         // of its last request answered
	last  store.Lease   // that answer
}

func (ls *lenders) get(id lenderID) *lender {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[id]
	if l == nil {
		l = &lender{nodes: map[string]*holder{}}
		ls.m[id] = l
	}
	return l
}

// replay is the answer the node was last sent on the key, when seq is the
// sequence number of the request it answered: its retry.
func (ls *lenders) replay(id lenderID, node string, seq int64) (store.Lease, bool) {
	if seq == 0 {
		return store.Lease{}, false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[id]
	if l == nil {
		return store.Lease{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.nodes[node]; h != nil && h.seq == seq {
		return h.last, true
	}
	return store.Lease{}, false
}

// hold counts the node a holder of the key until until, at now, and
// records the answer answer makes of the key's live holders, it among them.
func (ls *lenders) hold(id lenderID, node string, seq int64, now, until time.Duration, answer func(holders int) store.Lease) store.Lease {
	for {
		l := ls.get(id)
		l.mu.Lock()
		if l.gone {
			l.mu.Unlock()
			continue
		}
		h := l.nodes[node]
		if h == nil {
			h = &holder{}
			l.nodes[node] = h
		}
		h.until = max(h.until, until)
		for n, o := range l.nodes {
			if o.until <= now {
				delete(l.nodes, n)
			}
		}
		g := answer(len(l.nodes))
		h.seq, h.last = seq, g
		l.mu.Unlock()
		return g
	}
}

// leave forgets the node as a holder of the key, and the key once no node
// of the region holds it.
func (ls *lenders) leave(id lenderID, node string, now time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[id]
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.nodes, node)
	for n, o := range l.nodes {
		if o.until <= now {
			delete(l.nodes, n)
		}
	}
	if len(l.nodes) == 0 {
		l.gone = true
		delete(ls.m, id)
	}
}

// sweep forgets the keys whose holders' leases have all ended.
func (ls *lenders) sweep(now time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for id, l := range ls.m {
		l.mu.Lock()
		live := false
		for _, o := range l.nodes {
			live = live || o.until > now
		}
		if !live {
			l.gone = true
			delete(ls.m, id)
		}
		l.mu.Unlock()
	}
}
