package oracle

import (
	"fmt"
	"time"
)

// traceLen is how many of a key's last events a violation shows.
const traceLen = 20

type evKind uint8

const (
	evAdmitted evKind = iota
	evGranted
	evReturned
	evReleased
	evSettled
)

// traceEv is one event of a key, kept compact: formatted only when a
// violation shows it. Offered events are not kept: the admissions are what
// a bound judges, and a refused flood would push them out.
type traceEv struct {
	kind      evKind
	mode      Mode
	class     uint8 // a fallback admission: 1 reserved, 2 unreserved
	node      int
	n         int64
	at, store time.Duration // store: the store's clock; sent, for a grant
	ttl       time.Duration
	rate      float64
}

// ring is a key's last traceLen events, grown as they come.
type ring struct {
	evs  []traceEv
	next int
}

func (r *ring) push(e traceEv) {
	if len(r.evs) < traceLen {
		r.evs = append(r.evs, e)
		return
	}
	r.evs[r.next] = e
	r.next = (r.next + 1) % traceLen
}

// lines is the ring, oldest first, one line an event.
func (r *ring) lines() []string {
	out := make([]string, 0, len(r.evs))
	for i := range r.evs {
		out = append(out, r.evs[(r.next+i)%len(r.evs)].String())
	}
	return out
}

func (e traceEv) String() string {
	switch e.kind {
	case evAdmitted:
		class := ""
		switch e.class {
		case 1:
			class = " reserved"
		case 2:
			class = " unreserved"
		}
		return fmt.Sprintf("%v node %d admitted %d (%v%s, store %v)", e.at, e.node, e.n, e.mode, class, e.store)
	case evSettled:
		return fmt.Sprintf("%v node %d settled %d more (%v, store %v)", e.at, e.node, e.n, e.mode, e.store)
	case evGranted:
		return fmt.Sprintf("%v node %d granted %d + %.4g/s ttl %v (sent %v)", e.at, e.node, e.n, e.rate, e.ttl, e.store)
	case evReturned:
		return fmt.Sprintf("%v node %d returned %d", e.at, e.node, e.n)
	}
	return fmt.Sprintf("%v node %d released", e.at, e.node)
}
