package fallback

import (
	"math"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Allowances holds the fallback allowances of one rule's keys that have no
// lease to carry one: strict rules' keys, and the keys beyond a full key
// table, which share one. Keys that have not fallen back for a while are
// forgotten, so memory follows recent use. Time is the node's monotonic
// clock.
type Allowances struct {
	mu   sync.Mutex
	m    map[string]*allowanceEntry
	last time.Duration
}

type allowanceEntry struct {
	a    *Allowance
	used time.Duration
}

// forgetAfter is how long an unused allowance is kept: at least a minute
// and at least the time the rule takes to refill its capacity, so that a
// fresh, full allowance admits nothing a kept one would not.
func forgetAfter(r *rules.Rule) time.Duration {
	refill := float64(r.Period) * float64(r.Capacity()) / float64(r.Limit)
	if refill >= math.MaxInt64/2 { // a year's period, a huge burst, a tiny limit
		return math.MaxInt64 / 2
	}
	return max(time.Minute, time.Duration(refill))
}

// Get returns the key's allowance under r, making a full one for a key it
// does not hold.
func (s *Allowances) Get(r *rules.Rule, key string, now time.Duration) *Allowance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]*allowanceEntry)
	}
	if now-s.last > forgetAfter(r) {
		for k, e := range s.m {
			if now-e.used > forgetAfter(r) {
				delete(s.m, k)
			}
		}
		s.last = now
	}
	e, ok := s.m[key]
	if !ok {
		e = &allowanceEntry{a: NewAllowance()}
		s.m[key] = e
	}
	e.used = now
	return e.a
}

// Len is the number of allowances kept.
func (s *Allowances) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
