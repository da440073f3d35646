package region

import (
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// A node cut off from its region has its part withheld before the region
// lends the key again (lenders.reserve, called by every request on the
// key). On a key no other node of the region asks for, no request comes:
// the region's lease would go quiet, give its share back to the parent,
// and the parent lend it to other regions beside the cut node's
// fallback. So the region watches each holder's lease end, and from then
// on takes the absent holders' parts out of the key's lease every tick
// until they are back or their absence is over (docs/bounds.md,
// "Regions", step 6): the taking counts as the key's demand, and the
// region goes on asking the parent for that part.

// absentTick is how often the region takes absent holders' parts out of
// the keys no request comes for.
const absentTick = 50 * time.Millisecond

// absentees are the keys whose holders' leases end at some tick, and the
// keys with an absent holder now.
type absentees struct {
	mu       sync.Mutex
	due      map[int64]map[lenderID]*rules.Rule // by the tick a lease ends in
	draining map[lenderID]*rules.Rule
	last     int64 // the last tick looked at
}

// watch notes that a holder's lease on the key ends at until.
func (a *absentees) watch(id lenderID, r *rules.Rule, until time.Duration) {
	tick := int64(until/absentTick) + 1
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.due == nil {
		a.due, a.draining = map[int64]map[lenderID]*rules.Rule{}, map[lenderID]*rules.Rule{}
	}
	ids := a.due[tick]
	if ids == nil {
		ids = map[lenderID]*rules.Rule{}
		a.due[tick] = ids
	}
	ids[id] = r
}

// take moves the keys whose leases ended by now to those being drained,
// and returns those.
func (a *absentees) take(now time.Duration) map[lenderID]*rules.Rule {
	a.mu.Lock()
	defer a.mu.Unlock()
	tick := int64(now / absentTick)
	if a.last == 0 {
		a.last = tick - 1
	}
	for ; a.last < tick; a.last++ {
		for id, r := range a.due[a.last+1] {
			a.draining[id] = r
		}
		delete(a.due, a.last+1)
	}
	out := make(map[lenderID]*rules.Rule, len(a.draining))
	for id, r := range a.draining {
		out[id] = r
	}
	return out
}

// done stops draining the key: none of its holders is absent.
func (a *absentees) done(id lenderID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.draining, id)
}

// drainAbsent runs until stop closes: every tick it takes the absent
// holders' parts out of the keys they hold.
func (s *Store) drainAbsent(stop <-chan struct{}) {
	defer close(s.drained)
	for {
		t := s.clk.NewTimer(absentTick)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		now := s.clk.Mono()
		for id, r := range s.absent.take(now) {
			s.reserve(r, id.key, now)
			if k := s.keyLease(r, id.key); k != nil {
				// The absent holder's tokens have died with its lease: the
				// key no longer says them (nor its demand) to the parent,
				// and may leave.
				s.sayBelow(k, id, now)
			}
			if !s.keys.anyAbsent(id, now) {
				s.absent.done(id)
			}
		}
	}
}
