package region

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/store"
)

// A region's count of the nodes that hold each global key, what each
// node's fallback divides the rule by, and the last answer each was sent,
// to answer a retry again rather than apply it twice. A node holds a key
// from its request until its lease there ends, and is absent after that
// for the rule's absence (a reservation is kept for it), unless it gave
// the key back.
//
// The fallback counts follow the store's (docs/bounds.md, rule 5), in
// parts of the whole rule: the parent tells the region its part, 1/P; the
// region tells each node a count N, so that the nodes' parts, 1/N each,
// sum to at most 1/P. Each node is counted at the least it may use until
// its next request (what it was told, or what it said it used, if fewer),
// and a newcomer gets what the others leave: none while they leave none,
// until they ask again and are told their part of the new count.

type lenderID struct{ rule, key string }

// lenders are the global keys some node of the region holds.
type lenders struct {
	mu sync.Mutex
	m  map[lenderID]*lender
}

// lender is one global key's holders in the region.
type lender struct {
	mu      sync.Mutex
	gone    bool // out of the map: look it up again
	nodes   map[string]*holder
	absence time.Duration // how long a holder whose lease ended is kept as absent (the rule's)
}

type holder struct {
	until time.Duration // the region's monotonic clock: its lease's end here
	seq   int64         // of its last request answered
	last  store.Lease   // that answer
	n     int64         // what its fallback divides the rule by, at least, until its next request
	held  int64         // what it said it held at its last request, and what that request was lent
	// demand is what its last request said its callers ask of it, tokens
	// a second; says whether any of its requests said more than 0 (a node
	// before LeaseRequest.demand never does, and its 0 says nothing).
	demand float64
	says   bool

	// A holder whose lease here ended without its asking again is absent,
	// for the rule's absence: cut off from the region, its fallback admits
	// its part of the rule meanwhile, earning from its lease's end. The
	// region withholds that part from the others (rule 4's reservation, as
	// the store does for its holders): drained is how far its reservation
	// has been taken out of the region's lease, owed what has accrued and
	// not been taken yet (the lease held too little), and covered the
	// tokens taken, which what the holder reports it admitted on its
	// fallback is set against before anything is charged.
	drained time.Duration
	owed    float64
	covered int64

	// A holder back from its fallback (its request said on_fallback) goes
	// on admitting there until the answer reaches it: its reservation is
	// kept from backFrom, at its part before the request (backN), until
	// its next request, as the store keeps a returning holder's (markBack).
	backFrom time.Duration
	backN    int64
}

// holding is what one node's request on a key tells the region's count of
// its holders.
type holding struct {
	node           string
	seq            int64
	now, until     time.Duration // the region's clock: the request's arrival, its lease's end here
	absence        time.Duration // the rule's
	said, parent   int64         // what the node said its fallback divides by (0: nothing), and the parent's count for the region
	held           int64         // what the node said it holds
	demand         float64       // what the node said its callers ask, tokens/s (0: nothing, or unsaid)
	fromOnFallback bool          // the request said it left on the node's fallback
}

// absent reports whether the holder's lease here has ended at now.
func (h *holder) absent(now time.Duration) bool { return h.until <= now }

// maxFallbackNodes is what a node the others' parts leave no room for is
// told to divide by: its fallback admits nothing (the store's).
const maxFallbackNodes = math.MaxInt32

// fallbackNodes is what a node's fallback divides the whole rule by: its
// part of the region's 1/parent, no more than the others' parts
// (taken) leave, and no more than an even split among count holders.
func fallbackNodes(count int, parent int64, taken float64) int64 {
	rest := 1/float64(parent) - taken
	if rest <= 1e-9 {
		return maxFallbackNodes
	}
	return min(max(int64(count)*parent, int64(math.Ceil(1/rest-1e-9))), maxFallbackNodes)
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

// reserve takes out of the region's lease on the key, through take, the
// part of the rule each absent holder's fallback may have admitted since
// its reservation was last taken (rate/n a second from its lease's end,
// for the rule's absence; and for a holder back from its fallback, from
// its return until its next request), so that no other node is lent it.
// What take cannot give now is owed, and taken first at the next call.
func (ls *lenders) reserve(id lenderID, now time.Duration, rate float64, take func(n int64, fresh float64) int64) {
	ls.mu.Lock()
	l := ls.m[id]
	ls.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.nodes {
		var from, to time.Duration
		n := h.n
		switch {
		case h.backFrom > 0: // (also once its lease here ends before it asks again)
			from, to, n = max(h.drained, h.backFrom), min(now, h.until+l.absence), h.backN
		case h.absent(now):
			from, to = max(h.drained, h.until), min(now, h.until+l.absence)
		default:
			continue
		}
		fresh := 0.0
		if to > from {
			fresh = rate / float64(max(n, 1)) * (to - from).Seconds()
			h.owed += fresh
			h.drained = to
		}
		if want := int64(h.owed); want > 0 {
			if got := take(want, fresh); got > 0 {
				h.covered += got
				h.owed -= float64(got)
			}
		}
	}
}

// anyAbsent reports whether a holder of the key is absent at now, within
// its absence.
func (ls *lenders) anyAbsent(id lenderID, now time.Duration) bool {
	ls.mu.Lock()
	l := ls.m[id]
	ls.mu.Unlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.nodes {
		if h.absent(now) && now < h.until+l.absence {
			return true
		}
	}
	return false
}

// cover sets what the node reports it admitted on its fallback against
// its reservation, and says how much of it the reservation covers. A
// report of nothing ends the reservation: the node has been back for a
// request, and its fallback is closed.
func (ls *lenders) cover(id lenderID, node string, consumed int64) int64 {
	ls.mu.Lock()
	l := ls.m[id]
	ls.mu.Unlock()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.nodes[node]
	if h == nil {
		return 0
	}
	c := min(max(consumed, 0), h.covered)
	h.covered -= c
	if consumed <= 0 {
		h.covered = 0
	}
	return c
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

// hold counts the request's node a holder of the key until its lease here
// ends, tells it what its fallback divides the rule by (the region's part
// being 1/parent), and records the answer answer makes of the key's
// holders, it among them, that count, and the parts of the rule their
// fallbacks may use in all.
func (ls *lenders) hold(id lenderID, q holding, answer func(holders int, fallbackNodes int64, used float64) store.Lease) store.Lease {
	now, said := q.now, q.said
	for {
		l := ls.get(id)
		l.mu.Lock()
		if l.gone {
			l.mu.Unlock()
			continue
		}
		l.absence = q.absence
		h := l.nodes[q.node]
		if h == nil {
			h = &holder{}
			l.nodes[q.node] = h
		}
		switch {
		case q.fromOnFallback && (h.absent(now) || h.backFrom > 0):
			// Back, it admits on its fallback until this answer arrives:
			// its reservation goes on at the part it had.
			h.backFrom, h.backN, h.drained = now, max(h.n, 1), now
		case !q.fromOnFallback:
			h.backFrom = 0
		}
		h.until = max(h.until, q.until)
		h.owed = 0 // (back: what its reservation had not taken is not needed)
		var parts []float64
		for n, o := range l.nodes {
			switch {
			case o.until+l.absence <= now:
				delete(l.nodes, n)
			case o != h:
				// An absent holder's part stays counted: its fallback may
				// be admitting it.
				parts = append(parts, 1/float64(max(o.n, 1)))
			}
		}
		slices.Sort(parts) // (a sum in one order, whatever the map's)
		taken := 0.0
		for _, p := range parts {
			taken += p
		}
		told := fallbackNodes(len(l.nodes), max(q.parent, 1), taken)
		h.n = told
		if said > 0 {
			h.n = min(told, said)
		}
		h.held, h.demand = q.held, q.demand
		h.says = h.says || q.demand > 0
		g := answer(len(l.nodes), told, taken+1/float64(max(h.n, 1)))
		h.held += g.Granted
		h.seq, h.last = q.seq, g
		l.mu.Unlock()
		return g
	}
}

// below is what the key's present holders hold of what the region lent
// them, as they last said, with what it lent them since; and the demand
// they said, summed, said false when none of them says one.
func (ls *lenders) below(id lenderID, now time.Duration) (held int64, demand float64, said bool) {
	ls.mu.Lock()
	l := ls.m[id]
	ls.mu.Unlock()
	if l == nil {
		return 0, 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	demands := make([]float64, 0, len(l.nodes))
	for _, h := range l.nodes {
		if !h.absent(now) {
			held += h.held
			if h.says {
				demands = append(demands, h.demand)
				said = true
			}
		}
	}
	slices.Sort(demands) // (a sum in one order, whatever the map's)
	for _, d := range demands {
		demand += d
	}
	return held, demand, said
}

// demand is what the present holders of every key say their callers ask,
// summed (for the region's metrics).
func (ls *lenders) demand(now time.Duration) float64 {
	ls.mu.Lock()
	ids := make([]lenderID, 0, len(ls.m))
	for id := range ls.m {
		ids = append(ids, id)
	}
	ls.mu.Unlock()
	sum := 0.0
	for _, id := range ids {
		_, d, _ := ls.below(id, now)
		sum += d
	}
	return sum
}

// usingNodes is what a region whose nodes' fallbacks may use parts
// summing to used of the rule says its own fallback divides by: the most
// n with 1/n at least used (0 for none), so that the parent counts the
// region at no less than its nodes may admit, whatever it told the region
// since (docs/bounds.md, "Regions").
func usingNodes(used float64) int {
	if used <= 1e-9 {
		return 0
	}
	return int(min(math.Floor(1/used+1e-9), maxFallbackNodes))
}

// leave forgets the node as a holder of the key (it gave its tokens back:
// it is not absent, and holds no reservation), and the key once no node
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
		if o.until+l.absence <= now {
			delete(l.nodes, n)
		}
	}
	if len(l.nodes) == 0 {
		l.gone = true
		delete(ls.m, id)
	}
}

// sweep forgets the keys whose holders' leases have all ended, and their
// absences.
func (ls *lenders) sweep(now time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for id, l := range ls.m {
		l.mu.Lock()
		live := false
		for _, o := range l.nodes {
			live = live || o.until+l.absence > now
		}
		if !live {
			l.gone = true
			delete(ls.m, id)
		}
		l.mu.Unlock()
	}
}
