package slots

import (
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// The loop's decisions about one key, from its state and the clock: what
// its cap is, when it asks the allocator again and for how many. Nothing
// here does I/O.

// state is what the loop knows of a key.
type state struct {
	rule *rules.Rule
	name string
	// held is what the allocator holds for the node, by its last answer,
	// until ends; the node takes slots on it until valid (max_hold before
	// ends, rules.Rule.LeaseLife), so that a slot taken on it stays counted
	// by the store for max_hold at least.
	held         int64
	valid, ends  time.Duration // mono
	sent         time.Duration // when the last request went
	seq          int64         // its Request.Seq
	givenUp      int64         // Key.givenUp then
	asking       bool          // a request is on its way
	answered     bool          // a first answer (or failure) came
	first        chan struct{} // closed then
	idleSince    time.Duration // mono; 0: busy
	busy         bool          // a take, or one refused, since the loop last looked
	peak         int64         // most in flight since the last request
	lastReleased uint64        // the word's releases at the loop's last look
	lastIn       int64         // and its slots in flight
	sampled      time.Duration // when it last looked
	meanIn       float64       // in flight, averaged
	meanRate     float64       // releases per second, averaged
}

// leased reports whether the node may take slots on its lease at now.
func (s *state) leased(now time.Duration) bool { return s.held > 0 && now < s.valid }

// recorded reports whether the store still holds the node's slots at now.
func (s *state) recorded(now time.Duration) bool { return now < s.ends }

// target is the slots the node would hold: what it had in flight at most
// lately with a little room, more when takes were refused (up to doubling
// a round), within the rule's lease.max.
func target(r *rules.Rule, held, peak, refused, inFlight int64) int64 {
	base := max(held, peak, inFlight)
	t := max(peak, inFlight) + max(1, peak/4)
	if refused > 0 {
		t = base + max(1, min(refused, base))
	}
	return min(max(t, inFlight), r.Lease.Max)
}

// due reports whether the key should ask the allocator at now.
func (s *state) due(now time.Duration, k *Key, down bool) bool {
	if s.asking {
		return false
	}
	r := s.rule
	since := now - s.sent
	busy := k.InFlight() > 0 || k.refused.Load() > 0 || s.busy
	switch {
	case !s.answered:
		return true
	case s.leased(now):
		// Renew every refresh while it holds anything; sooner when takes
		// are refused and the allocator may have more.
		return since >= r.Lease.Refresh || k.refused.Load() > 0 && since >= r.Lease.Refresh/4
	case down:
		return busy && since >= r.Lease.Refresh
	}
	return busy && since >= r.Lease.Refresh/4
}

// fallbackCap is the node's fallback: limit/N in flight, none for a
// closed rule.
func fallbackCap(r *rules.Rule, nodes int) int64 {
	if r.Failure == rules.FailClosed {
		return 0
	}
	return r.Limit / int64(max(nodes, 1))
}

// holdEWMA is how fast the observed hold time follows: about a second.
const holdEWMA = time.Second

// sample folds the key's in flight and releases since the last look into
// its averages, publishes the mean hold time (Little's law), and returns
// the slots taken since the last look.
func (s *state) sample(now time.Duration, k *Key) (taken int64) {
	w := k.word.Load()
	rel, in := releases(w), int64(w&inFlightMask)
	released := int64((rel - s.lastReleased) & releaseMask)
	taken = in - s.lastIn + released
	s.lastIn, s.lastReleased = in, rel
	dt := now - s.sampled
	if s.sampled == 0 || dt <= 0 {
		s.sampled = now
		return taken
	}
	a := min(float64(dt)/float64(holdEWMA), 1)
	s.meanIn += a * (float64(in) - s.meanIn)
	s.meanRate += a * (float64(released)/dt.Seconds() - s.meanRate)
	s.sampled = now
	if s.meanRate > 0 && s.meanIn > 0 {
		k.hold.Store(int64(s.meanIn / s.meanRate * float64(time.Second)))
	}
	return taken
}
