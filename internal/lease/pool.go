// Package lease keeps a node's leased tokens: one Pool per (rule, key),
// filled ahead of need by batched Acquire calls, sized to the key's rate,
// expired at the lease TTL and returned when the key goes idle.
package lease

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
)

// evicted marks a pool that has left its table: every Take fails and the
// caller looks the key up again.
const evicted = math.MinInt64 / 2

// Pool is the local bucket of one (rule, key). Take is the hot path: one
// atomic compare-and-swap, no clock, no lock, no allocation. Everything
// else about the pool is the manager goroutine's.
type Pool struct {
	tokens  atomic.Int64  // spendable leased tokens; < 0 once evicted
	gen     atomic.Uint64 // bumped when tokens leave because their lease ended
	low     atomic.Int64  // below this many tokens a refill is requested
	flags   flags         // queued, served, sharing, fresh: see flagQueued
	holders atomic.Int32  // the allocator's last count of this key's holders
	// missed counts tokens asked for but not taken from the lease: refusals
	// and fallback admissions, for the rate estimate.
	missed atomic.Int64
	// consumed counts tokens admitted outside a lease, not yet reported;
	// consumedSince is when the first of them was admitted (a mono, 0:
	// none).
	consumed      atomic.Int64
	consumedSince atomic.Int64
	// fallback is the key's share of the rule on this node, limit/N, made
	// the first time the key is decided without a lease, and let go at the
	// next grant (retireFallback). The pool stays until the share would
	// have been full again (flagRefilling), so that a key back after a
	// pause does not start as a new key, on a fresh share.
	fallback  atomic.Pointer[fallback.Share]
	notBefore atomic.Int64 // the mono before which no refill is sent
	// remaining is what the allocator had left for the key after its last
	// grant (see flagFresh).
	remaining atomic.Int64

	// keyRule is the rule for this key when the table's rule has overrides
	// (see Rule).
	keyRule atomic.Pointer[keyRule]

	table *Table
	key   string
	own   managerState // owned by the manager goroutine
}

// A pool's yes/no states, in its flags.
const (
	// flagQueued: a refill is queued or in flight (at most one per key).
	flagQueued uint32 = 1 << iota
	// flagServed: the allocator is deciding for this key: it has answered
	// an Acquire for it within the lease TTL (with or without tokens). An
	// empty served pool refuses; an unserved one falls back.
	flagServed
	// flagSharing: the pool earns a share of the rule's rate: the share is
	// this node's limit even when the allocator cannot be reached.
	flagSharing
	// flagFresh: no fallback decision has been made since the last grant.
	flagFresh
	// flagAsleep: the key's share sleeps (sleep.go): the first Take, or a
	// Take refused, wakes it.
	flagAsleep
	// flagRefilling: a fallback share was let go before it was full again;
	// the pool stays as long as it would have (idleAfter).
	flagRefilling
)

// flags holds a pool's yes/no states in one atomic word, where an
// atomic.Bool each would take 16 bytes of every key's pool.
type flags struct{ w atomic.Uint32 }

func (f *flags) is(flag uint32) bool { return f.w.Load()&flag != 0 }

func (f *flags) set(flag uint32, on bool) {
	if on {
		f.w.Or(flag)
	} else {
		f.w.And(^flag)
	}
}

// raise sets flag and reports whether it was clear: CompareAndSwap(false, true).
func (f *flags) raise(flag uint32) bool { return f.w.Or(flag)&flag == 0 }

// lower clears flag and reports whether it was set: CompareAndSwap(true, false).
func (f *flags) lower(flag uint32) bool { return f.w.And(^flag)&flag != 0 }

// keyRule is the rule of one key, resolved from the table's rule from.
type keyRule struct{ from, rule *rules.Rule }

// Key is the key this pool limits.
func (p *Pool) Key() string { return p.key }

// Rule is the rule for the pool's key: the table's current rule, or its
// override for the key. It is resolved again when the table's rule changes.
func (p *Pool) Rule() *rules.Rule {
	base := p.table.Rule()
	if !base.HasOverrides() {
		return base
	}
	if kr := p.keyRule.Load(); kr != nil && kr.from == base {
		return kr.rule
	}
	kr := &keyRule{from: base, rule: base.ForKey(p.key)}
	p.keyRule.Store(kr)
	return kr.rule
}

// Take spends n leased tokens if the pool holds them. It returns the tokens
// left and whether it took them. left < 0 means the pool was evicted: look
// the key up again.
func (p *Pool) Take(n int64) (left int64, ok bool) {
	for {
		v := p.tokens.Load()
		if v < n {
			if p.flags.is(flagAsleep) { // a share asleep earns again (sleep.go)
				p.WantRefill()
			}
			return v, false
		}
		if p.tokens.CompareAndSwap(v, v-n) {
			if v-n < p.low.Load() {
				p.WantRefill()
			}
			return v - n, true
		}
	}
}

// Generation changes whenever tokens are removed because their lease
// ended; Give needs the value read before the Take it undoes.
func (p *Pool) Generation() uint64 { return p.gen.Load() }

// Give puts back n tokens that Take took (a multi-rule check that failed on
// another rule), if their lease has not ended since: gen is Generation as
// read before that Take.
// It reports whether it put them back.
func (p *Pool) Give(n int64, gen uint64) bool {
	for {
		v := p.tokens.Load()
		if v < 0 || p.gen.Load() != gen {
			return false // evicted, or the tokens' lease is over: they are gone
		}
		if p.tokens.CompareAndSwap(v, v+n) {
			return true
		}
	}
}

// Tokens is the number of leased tokens held now.
func (p *Pool) Tokens() int64 { return max(p.tokens.Load(), 0) }

// Served reports whether the allocator is deciding for this key.
func (p *Pool) Served() bool { return p.flags.is(flagServed) }

// Fallback returns the key's fallback share, making it when there is none:
// the first time, or after a grant let it go (retireFallback).
func (p *Pool) Fallback() *fallback.Share {
	for { // never nil: a grant may let a share go between a swap and a load
		if s := p.fallback.Load(); s != nil {
			return s
		}
		if s := new(fallback.Share); p.fallback.CompareAndSwap(nil, s) {
			return s
		}
	}
}

// DropFallback lets s go if it is still the key's share and full, as a
// fresh one would be: for a request that made it and then found the key
// served (it needs no share).
func (p *Pool) DropFallback(s *fallback.Share, now time.Time) {
	if s.Full(now) {
		p.fallback.CompareAndSwap(s, nil)
	}
}

// retireFallback lets the key's fallback share go at a grant: about 90
// bytes a key that the allocator serves. The grant's news supersedes what
// the share held: what the key admitted from it has been reported or paid
// from the lease (payInFlight), and a fallback after this grant caps its
// share at the node's part of what the allocator had left (LeftCentrally).
// A fresh share, made if the key falls back later, is full, so under that
// cap it decides as the old one would have, unless the old one held less
// than the cap: it then admits up to the difference more, out of tokens the
// allocator had left. A request that found the pool empty before the grant
// may still decide on the old share, as it would have a moment earlier;
// one that comes to the share after, finds the key served and decides
// again (the client's withoutLease). clk gives the shares' wall time.
func (p *Pool) retireFallback(clk clock.Clock) {
	s := p.fallback.Load()
	if s == nil || !p.fallback.CompareAndSwap(s, nil) {
		return
	}
	if !s.Full(clk.Now()) {
		p.flags.set(flagRefilling, true)
	}
	// A request deciding on the old share may have read the grant's news
	// (LeftCentrally) for it: the next share needs it too.
	p.flags.set(flagFresh, true)
}

// Sharing reports whether the pool earns a share of the rule's rate: its
// node then keeps that share as its limit until the lease ends, allocator
// or not.
func (p *Pool) Sharing() bool { return p.flags.is(flagSharing) }

// Holders is the allocator's last count of this key's holders, 0 if unknown.
func (p *Pool) Holders() int { return int(p.holders.Load()) }

// LeftCentrally returns, once after each grant, what the allocator had
// left for the key, so that a fallback that follows can start from the
// fleet's true state (usually an empty bucket under load, not a full share).
func (p *Pool) LeftCentrally() (int64, bool) {
	if !p.flags.lower(flagFresh) {
		return 0, false
	}
	return p.remaining.Load(), true
}

// NotBefore is when the next refill may be sent, on the manager's time.
func (p *Pool) NotBefore() time.Time { return p.notBeforeMono().time() }

func (p *Pool) notBeforeMono() mono { return mono(p.notBefore.Load()) }

// RetryIn is how long until the next refill may be sent.
func (p *Pool) RetryIn() time.Duration { return max(p.notBeforeMono().Sub(p.table.m.now()), 0) }

// Refused records demand the pool could not serve, for the rate estimate,
// and asks for a refill.
func (p *Pool) Refused(n int64) {
	p.missed.Add(n)
	p.WantRefill()
}

// Consumed records n tokens admitted now outside a lease (from the
// fallback share): the next Acquire reports them, with their age, to be
// debited centrally.
func (p *Pool) Consumed(n int64) {
	p.missed.Add(n)
	p.consumed.Add(n)
	p.consumedSince.CompareAndSwap(0, int64(p.table.m.now()))
	p.WantRefill()
}

// Unconsume takes back a fallback admission recorded by Consumed whose
// request did not go ahead after all.
func (p *Pool) Unconsume(n int64) { p.consumed.Add(-n) }

// takeConsumed hands the unreported consumption to a report: the tokens
// and how long ago the first was admitted.
func (p *Pool) takeConsumed(now mono) (int64, time.Duration) {
	n := p.consumed.Swap(0)
	since := p.consumedSince.Swap(0)
	if n <= 0 || since == 0 {
		return max(n, 0), 0
	}
	return n, max(now.Sub(mono(since)), 0)
}

// restoreConsumed puts back a report that did not reach the allocator.
func (p *Pool) restoreConsumed(n int64, age time.Duration, sent mono) {
	if n <= 0 {
		return
	}
	p.consumed.Add(n)
	since := int64(sent.Add(-age))
	for {
		cur := p.consumedSince.Load()
		if (cur != 0 && cur <= since) || p.consumedSince.CompareAndSwap(cur, since) {
			return
		}
	}
}

// WantRefill asks the manager for a lease unless one is already on its way.
// It never blocks (a short lock on the manager's inbox).
func (p *Pool) WantRefill() {
	if p.flags.is(flagAsleep) {
		if p.flags.lower(flagAsleep) {
			p.table.m.inbox.put(p) // wakes its share (sleep.go)
		}
		return
	}
	if p.flags.is(flagQueued) || !p.flags.raise(flagQueued) {
		return
	}
	p.table.m.inbox.put(p)
}

// taken is how many tokens Take has spent in all: what went in less what
// is left. Only the manager calls it.
func (p *Pool) taken() int64 { return p.own.credited - max(p.tokens.Load(), 0) }

// remove takes up to n tokens out of the pool for the manager (expiry,
// return) and reports how many it took.
func (p *Pool) remove(n int64) int64 {
	for {
		v := p.tokens.Load()
		got := min(max(v, 0), n)
		if got == 0 {
			return 0
		}
		if p.tokens.CompareAndSwap(v, v-got) {
			p.own.credited -= got
			return got
		}
	}
}
