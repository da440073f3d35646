package fallback

import (
	"math"
	"math/big"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/rules"
)

// Share is one key's fallback allowance on this node: a token bucket of
// burst/N at rate/N. It follows N as the fleet changes.
type Share struct {
	mu    sync.Mutex
	nodes int
	rule  *rules.Rule
	tb    *bucket.TokenBucket // nil when burst/N rounds to zero: deny
}

// AllowN decides n tokens at now with the fleet at nodes.
func (s *Share) AllowN(r *rules.Rule, nodes int, now time.Time, n int64) bucket.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rule != r || s.nodes != nodes {
		s.resize(r, nodes, now)
	}
	if s.tb == nil {
		// The fleet's share rounds to nothing per node: the rule's limit is
		// smaller than the fleet. Denying keeps the fleet within the limit.
		return bucket.Decision{Limit: r.Limit, RetryAfter: r.Period}
	}
	d, err := s.tb.AllowN(now, n)
	if err != nil { // a cost above this node's share of the burst
		return bucket.Decision{Limit: r.Limit, RetryAfter: r.Period}
	}
	d.Limit = r.Limit
	return d
}

// Cap keeps at most n tokens in the share: a key that falls back after
// leases starts from what the fleet had left, not from a full share.
func (s *Share) Cap(r *rules.Rule, nodes int, now time.Time, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rule != r || s.nodes != nodes {
		s.resize(r, nodes, now)
	}
	if s.tb != nil {
		s.tb.Cap(now, n)
	}
}

// Full reports whether the share holds its whole burst/N at now (or was
// never used, or admits nothing): a fresh share would decide as it does.
func (s *Share) Full(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tb == nil || s.tb.Full(now)
}

// Refund gives back n tokens that AllowN took for a request that did not
// go ahead after all.
func (s *Share) Refund(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tb != nil {
		s.tb.Deposit(n)
	}
}

// resize rebuilds the bucket for a new N, keeping no more tokens than it
// held: a shrinking fleet must not mint a burst.
// Admits reports whether a node's share of r over nodes can ever admit a
// request: not when the burst split over the fleet is less than a token.
func Admits(r *rules.Rule, nodes int) bool { return r.Capacity()/int64(max(nodes, 1)) > 0 }

func (s *Share) resize(r *rules.Rule, nodes int, now time.Time) {
	var held int64 = -1
	if s.tb != nil {
		held = s.tb.Drain()
	}
	s.rule, s.nodes, s.tb = r, nodes, nil
	capacity := r.Capacity() / int64(nodes)
	if capacity <= 0 {
		return
	}
	tokens, per := shareRate(r.Limit, r.Period, nodes)
	tb, err := bucket.NewTokenBucketPer(capacity, tokens, per, now)
	if err != nil {
		return
	}
	if held >= 0 {
		tb.Drain()
		tb.Deposit(held)
	}
	s.tb = tb
}

// ShareRate is one node's part of r's rate with the fleet at nodes, as
// tokens per a duration for bucket.NewTokenBucketPer: r.Limit per
// r.Period×nodes. See shareRate for periods past the longest Duration.
func ShareRate(r *rules.Rule, nodes int) (tokens int64, per time.Duration) {
	return shareRate(r.Limit, r.Period, nodes)
}

// shareRate is limit per period×nodes (nodes below 1 count as 1). A long
// period over many nodes (a year over 292) is more than a Duration holds,
// and the product would wrap: to a negative period that denies everything,
// or to a shorter one that admits many times the limit. Past the longest
// Duration the period saturates and the tokens shrink with it, rounded
// down, so the rate never grows; at least one token, since a bucket needs
// a rate: that is one token in ~292 years.
func shareRate(limit int64, period time.Duration, nodes int) (int64, time.Duration) {
	n := int64(max(nodes, 1))
	if period <= math.MaxInt64/time.Duration(n) {
		return limit, period * time.Duration(n)
	}
	span := new(big.Int).Mul(big.NewInt(int64(period)), big.NewInt(n))
	tokens := new(big.Int).Mul(big.NewInt(limit), big.NewInt(math.MaxInt64))
	tokens.Quo(tokens, span) // below limit: span is above MaxInt64
	return max(tokens.Int64(), 1), math.MaxInt64
}

// Shares holds the fallback shares of one rule's keys. Keys that have not
// fallen back for a while are forgotten, so memory follows recent use.
type Shares struct {
	mu   sync.Mutex
	m    map[string]*shareEntry
	last time.Time
}

type shareEntry struct {
	share Share
	used  time.Time
}

// forgetAfter is how long an unused share is kept: at least a minute and
// at least the time the rule's bucket takes to refill, so a fresh, full
// share admits nothing a kept one would not.
func forgetAfter(r *rules.Rule) time.Duration {
	refill := float64(r.Period) * float64(r.Capacity()) / float64(r.Limit)
	if refill >= math.MaxInt64 { // a year's period, a huge burst, a tiny limit
		return math.MaxInt64
	}
	return max(time.Minute, time.Duration(refill))
}

// Get returns the key's share under r, creating it.
func (s *Shares) Get(r *rules.Rule, key string, now time.Time) *Share {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]*shareEntry)
	}
	if now.Sub(s.last) > forgetAfter(r) {
		for k, e := range s.m {
			if now.Sub(e.used) > forgetAfter(r) {
				delete(s.m, k)
			}
		}
		s.last = now
	}
	e, ok := s.m[key]
	if !ok {
		e = &shareEntry{}
		s.m[key] = e
	}
	e.used = now
	return &e.share
}

// Len is the number of shares kept.
func (s *Shares) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
