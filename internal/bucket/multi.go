package bucket

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Multi checks several rules as one: "10 per second AND 1,000 per hour".
// A request passes only if every rule lets it, and a refused request spends
// from none of them, so a client never pays for a request that never ran.
//
// The check is atomic: Multi locks all its rules, peeks at every one, then
// spends from every one. Rules are locked in the order they were created,
// the same order for every Multi, so Multis that share rules cannot deadlock.
//
// A Multi is safe for concurrent use, and is itself a Limiter. The Queue
// cannot be part of one: it makes callers wait instead of deciding.
type Multi struct {
	rules  []rule // as given; AllowNEach reports in this order
	locked []rule // by creation order: the one order every Multi locks in
	limit  int64  // the smallest ceiling: no larger cost can ever pass
}

// rule is what Multi needs from an algorithm: its lock, and a decision in
// two phases so that all rules can be asked before any is spent. Each
// algorithm's own AllowN is built from the same two phases.
type rule interface {
	Limiter
	lock()
	unlock()
	lockOrder() uint64
	ceiling() int64 // the largest cost that can ever pass
	peekLocked(now time.Time, n int64) Decision
	spendLocked(n int64)
}

// decide is every algorithm's AllowN: the cost checked, then the two
// phases under the limiter's lock.
func decide(r rule, now time.Time, n int64) (Decision, error) {
	if err := checkCost(n, r.ceiling()); err != nil {
		return Decision{Limit: r.ceiling()}, err
	}
	r.lock()
	d := r.peekLocked(now, n)
	if d.Allowed {
		r.spendLocked(n)
	}
	r.unlock()
	return d, nil
}

// guard is the mutex every algorithm embeds, with its place in the global
// lock order.
type guard struct {
	mu    sync.Mutex
	order uint64
}

var lastOrder atomic.Uint64

// nextOrder numbers limiters in creation order, which is the lock order.
func nextOrder() uint64 { return lastOrder.Add(1) }

func (g *guard) lock()             { g.mu.Lock() }
func (g *guard) unlock()           { g.mu.Unlock() }
func (g *guard) lockOrder() uint64 { return g.order }

// NewMulti combines limiters made by this package (TokenBucket, FixedWindow,
// SlidingLog, SlidingWindow). Each may appear once; a limiter may belong to
// several Multis and still be used on its own.
func NewMulti(limiters ...Limiter) (*Multi, error) {
	if len(limiters) == 0 {
		return nil, errors.New("bucket: multi: at least one limiter is needed")
	}
	m := &Multi{rules: make([]rule, 0, len(limiters))}
	for i, l := range limiters {
		r, ok := l.(rule)
		if !ok || r == nil || isNilRule(r) {
			return nil, fmt.Errorf("bucket: multi: limiter %d (%T) is not a limiter made by package bucket", i, l)
		}
		if slices.Contains(m.rules, r) {
			return nil, fmt.Errorf("bucket: multi: limiter %d is given twice", i)
		}
		m.rules = append(m.rules, r)
	}
	m.locked = slices.SortedFunc(slices.Values(m.rules), func(a, b rule) int {
		return cmp.Compare(a.lockOrder(), b.lockOrder())
	})
	m.limit = m.rules[0].ceiling()
	for _, r := range m.rules {
		m.limit = min(m.limit, r.ceiling())
	}
	return m, nil
}

// isNilRule catches a typed nil pointer, which would panic on first use.
func isNilRule(r rule) bool {
	switch v := r.(type) {
	case *TokenBucket:
		return v == nil
	case *FixedWindow:
		return v == nil
	case *SlidingLog:
		return v == nil
	case *SlidingWindow:
		return v == nil
	}
	return false
}

// Allow is AllowN(now, 1) reduced to its answer.
func (m *Multi) Allow(now time.Time) bool {
	d, _ := m.AllowN(now, 1)
	return d.Allowed
}

// AllowN passes a request of cost n if every rule lets it, spending from all
// of them, and spends from none if any refuses. The combined Decision:
//
//   - allowed: Limit, Remaining and ResetAfter are those of the rule with
//     the fewest tokens left, the one that binds next (on a tie, the one
//     that takes longest to reset);
//   - refused: Limit, RetryAfter and ResetAfter are those of the refusing
//     rule that asks the longest wait, and Remaining is the fewest tokens
//     any rule holds (nothing was spent).
//
// A cost above the smallest rule's ceiling is ErrCostAboveCapacity.
func (m *Multi) AllowN(now time.Time, n int64) (Decision, error) {
	d, _, err := m.decide(now, n, nil, false)
	return d, err
}

// AllowNEach is AllowN that also reports each rule's own verdict, in the
// order given to NewMulti, appended to each[:0]: callers see which rule
// refused. An entry says what that rule alone would have answered; when the
// Multi refuses, nothing was spent even from the rules that allowed. Pass a
// reused slice to avoid an allocation per call.
func (m *Multi) AllowNEach(now time.Time, n int64, each []Decision) (Decision, []Decision, error) {
	return m.decide(now, n, each[:0], true)
}

// decide is the one path of AllowN and AllowNEach: lock all, peek all, then
// spend all or none.
func (m *Multi) decide(now time.Time, n int64, each []Decision, report bool) (Decision, []Decision, error) {
	if err := checkCost(n, m.limit); err != nil {
		return Decision{Limit: m.limit}, each, err
	}
	for _, r := range m.locked {
		r.lock()
	}
	var c combined
	for _, r := range m.rules {
		d := r.peekLocked(now, n)
		c.add(d, n)
		if report {
			each = append(each, d)
		}
	}
	if !c.refused {
		for _, r := range m.rules {
			r.spendLocked(n)
		}
	}
	for i := len(m.locked) - 1; i >= 0; i-- {
		m.locked[i].unlock()
	}
	return c.decision(), each, nil
}

// combined folds the rules' decisions into one.
type combined struct {
	binding Decision // allowed rule with the fewest tokens left after spending (tie: slowest to reset)
	refusal Decision // refusing rule with the longest RetryAfter
	allowed bool     // binding is set
	refused bool     // refusal is set: the Multi refuses
	unspent int64    // fewest tokens any rule holds if nothing is spent
	rulesIn int
}

func (c *combined) add(d Decision, n int64) {
	held := d.Remaining
	if d.Allowed {
		held += n // the peek counted the cost as spent
		if !c.allowed || d.Remaining < c.binding.Remaining ||
			(d.Remaining == c.binding.Remaining && d.ResetAfter > c.binding.ResetAfter) {
			c.binding, c.allowed = d, true
		}
	} else if !c.refused || d.RetryAfter > c.refusal.RetryAfter {
		c.refusal, c.refused = d, true
	}
	if c.rulesIn == 0 || held < c.unspent {
		c.unspent = held
	}
	c.rulesIn++
}

func (c *combined) decision() Decision {
	if !c.refused {
		return c.binding
	}
	d := c.refusal
	d.Remaining = c.unspent
	return d
}
