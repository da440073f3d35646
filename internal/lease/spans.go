package lease

import "github.com/allot-dev/allot/internal/mutate"

// spans are a key's leased tokens by the instant they die, oldest first,
// so that no token outlives its lease (docs/bounds.md, rule 2) and none
// dies before it: a new lease's tokens die at its own end, what older
// leases left at theirs. The hot path spends from one counter; spends are
// charged to the oldest tokens first, when the Core next looks (settle).
type spans struct {
	credited int64 // tokens ever put in, less those the Core took out
	seen     int64 // the tokens taken when the spans were last settled
	n        [maxSpans]int64
	at       [maxSpans]mono
	k        int // spans in use
}

// maxSpans bounds the leases whose tokens a key keeps apart. A key asks
// for tokens when it runs low, so it rarely holds more than two leases'
// worth; a third older one merges with the next, taking the earlier end.
const maxSpans = 3

// settle charges what the hot path took since the last settle to the
// oldest spans, and reports whether a span went with it: tokens taken
// before then and given back (Give) would have no lease left of their own,
// so the owner makes their generation stale, and they are not given back.
//
// Tokens given back since the last settle (taken fell) go to the oldest
// span, which dies first: they were charged to it, or to a later one when
// it ran out (then it went, and they cannot come back). Counted nowhere,
// they would live on to the newest lease's end.
func (s *spans) settle(taken int64) (dropped bool) {
	spent := taken - s.seen
	s.seen = taken
	if spent < 0 {
		if s.k > 0 {
			s.n[0] -= spent
		}
		return false
	}
	for i := 0; i < s.k && spent > 0; i++ {
		d := min(spent, s.n[i])
		s.n[i] -= d
		spent -= d
	}
	// Spent spans go, but the newest: it is where a share's earnings go.
	k := s.k
	s.drop(func(i int) bool { return s.n[i] <= 0 && i < s.k-1 })
	return s.k < k
}

// put adds n tokens (n may be 0: a lease of a share alone) that die at end.
func (s *spans) put(n int64, end mono) {
	n = max(n, 0)
	if mutate.On(mutate.CarryEarliest) && s.k > 0 && s.n[0] > 0 {
		end = s.at[0] // (the old fault: what is left takes the oldest lease's end)
	}
	if s.k > 0 && !end.After(s.at[s.k-1]) { // no later than the newest: join it
		s.n[s.k-1] += n
		s.at[s.k-1] = min(s.at[s.k-1], end)
		return
	}
	if s.k == maxSpans {
		s.n[1] += s.n[0]
		s.at[1] = s.at[0]
		s.drop(func(i int) bool { return i == 0 })
	}
	s.n[s.k], s.at[s.k] = n, end
	s.k++
}

// grow adds n tokens to the newest span (what a share earned), and reports
// false when there is none: no lease to hold them.
func (s *spans) grow(n int64) bool {
	if s.k == 0 {
		return false
	}
	s.n[s.k-1] += n
	return true
}

// expire drops the spans that have ended by now and returns their tokens.
func (s *spans) expire(now mono) int64 {
	var gone int64
	s.drop(func(i int) bool {
		if now.Before(s.at[i]) {
			return false
		}
		gone += s.n[i]
		return true
	})
	return gone
}

// next is when the oldest span ends; false when there is none.
func (s *spans) next() (mono, bool) {
	if s.k == 0 {
		return 0, false
	}
	return s.at[0], true
}

// end is when the newest lease's tokens die; zero when there is none.
func (s *spans) end() mono {
	if s.k == 0 {
		return 0
	}
	return s.at[s.k-1]
}

// drop removes the spans gone says, keeping the order.
func (s *spans) drop(gone func(i int) bool) {
	j := 0
	for i := 0; i < s.k; i++ {
		if !gone(i) {
			s.n[j], s.at[j] = s.n[i], s.at[i]
			j++
		}
	}
	for i := j; i < s.k; i++ {
		s.n[i], s.at[i] = 0, 0
	}
	s.k = j
}
