package lease

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// grant puts a lease into its pool and schedules the key's next request.
func (m *Manager) grant(p *Pool, g Grant, now mono) {
	f := p.own.inFlight
	if f == nil { // (never: flush sends one request of a key at a time)
		return
	}
	p.own.inFlight, p.own.unacked, p.own.solo, p.own.givingBack = nil, nil, false, false
	r := p.Rule()
	if !(g.Rate >= 0) { // NaN or negative: no share
		g.Rate = 0
	}
	g.Rate = min(g.Rate, r.Rate())
	p.holders.Store(int32(min(g.Holders, math.MaxInt32)))
	m.sawHolders(g.Holders)
	p.remaining.Store(g.Remaining)
	p.flags.set(flagFresh, true)
	p.own.short = g.Granted < f.want
	// The TTL runs from when the request was sent, on this node's monotonic
	// clock, and ends a sweep early: the sweep is when tokens are removed. A
	// lease shorter than two sweeps (a window about to end) ends at half its
	// TTL instead, and the next sweep is brought forward to meet it.
	margin := min(m.cfg.Sweep, g.TTL/2)
	expiry := f.sent.Add(g.TTL - margin)
	if margin < m.cfg.Sweep && expiry.Before(m.nextSweep) {
		m.nextSweep = expiry
	}
	p.own.servedUntil = f.sent.Add(g.TTL)
	p.flags.set(flagServed, true)
	p.retireFallback(m.clk)
	m.accrue(p, now) // the old share, up to the answer
	m.setShare(p, f, g, now)
	kept := 0.0 // of what the fallback share admitted in flight (keptInFlight)
	if g.Rate > 0 {
		kept = keptInFlight(max(now.Sub(f.sent), 0), g, r.Rate()/float64(max(m.cfg.Nodes(), 1)))
	}
	if (g.Granted > 0 || g.Rate > 0) && expiry.After(now) {
		m.deposit(p, payInFlight(p, g.Granted, kept), expiry)
		p.own.epoch = g.Epoch
	}
	if g.Rate > 0 {
		m.oweInFlight(p, kept)
	}
	m.settleOwed(p)
	m.scheduleNext(p, r, f, g, now)
}

// scheduleNext decides when the key asks again. A key with a rate share
// renews it about every refresh interval, so that shares follow demand,
// and early enough that the answer arrives before the lease ends; the
// renewal stays queued, so the hot path asks for nothing meanwhile. It asks
// sooner only when it fell short and the allocator expects free tokens
// before a TTL has passed. A key without a share asks when its pool runs
// low, or, if it fell short, after retryDelay.
func (m *Manager) scheduleNext(p *Pool, r *rules.Rule, f *flight, g Grant, now mono) {
	if g.Rate > 0 {
		next := f.sent.Add(m.renewAfter(r))
		if g.Granted < f.want && g.RetryAfter < g.TTL {
			next = min(next, now.Add(min(max(g.RetryAfter, 2*m.cfg.Sweep), fillTime(r)/2)))
		}
		next = max(next, now)
		p.notBefore.Store(int64(next))
		m.delayed.push(p, next) // p stays queued
		return
	}
	next := now
	if g.Granted < f.want {
		// Jittered, the wait may pass the lease's end; the next Acquire must
		// leave in time to keep the key served, or the key would be taken
		// for a new one (a fallback share, a Check per request).
		next = max(min(now.Add(retryDelay(r, g.RetryAfter)), f.sent.Add(m.latestRenewal(r))), now)
	}
	p.notBefore.Store(int64(next))
	p.flags.set(flagQueued, false)
}

// payInFlight pays, from a lease just granted, for what the key admitted
// from its fallback share while the request was in flight: the allocator
// counted only the consumption the request carried, so the rest must come
// out of these tokens, or a new key could pass its limit by what it
// admitted in one round trip. What the share may keep (kept, with a rate
// share) is not paid: paid first, it would leave fewer tokens for later
// and the share's due unused, which cost the fleet of TestLoadedNodes
// about 20 tokens in its first second. It returns the tokens left to
// deposit.
func payInFlight(p *Pool, granted int64, kept float64) int64 {
	for {
		c := p.consumed.Load()
		use := min(max(c-int64(min(kept, float64(c))), 0), granted)
		if use == 0 {
			return granted
		}
		if p.consumed.CompareAndSwap(c, c-use) {
			if c == use {
				p.consumedSince.Store(0)
			}
			return granted - use
		}
	}
}

// retryDelay paces a key without a rate share whose lease fell short,
// because the allocator had too few tokens or kept some for the key's other
// holders: it asks again after a refresh interval, or later if the
// allocator says tokens will take longer (within a TTL). Under contention
// the fleet then makes about one call per node and interval, and the tokens
// wait for it centrally; asking sooner would only take other holders'
// shares. But the wait stays under half the time the central bucket takes
// to fill, or tokens would spill over its capacity between calls and be
// lost.
//
// A jitter of ±25% keeps nodes that starved together from asking together:
// with ±10% or none, the bench saw them lock in phase and admit in waves of
// one refresh interval.
func retryDelay(r *rules.Rule, retryAfter time.Duration) time.Duration {
	d := max(min(max(retryAfter, r.Lease.Refresh), r.Lease.TTL, fillTime(r)/2), time.Millisecond)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// fillTime is how long the rule's bucket takes to fill from empty.
func fillTime(r *rules.Rule) time.Duration {
	return time.Duration(min(float64(r.Capacity())/r.Rate()*float64(time.Second), math.MaxInt64/2))
}

// deposit adds tokens that die at expiry. What older leases left keeps its
// own, earlier expiry (see carry), so no token outlives its lease.
func (m *Manager) deposit(p *Pool, n int64, expiry mono) {
	if left := max(p.tokens.Load(), 0); left > 0 && !p.own.expiry.IsZero() {
		// A carry still pending dies earlier than the current lease; all that
		// is left now takes that earlier expiry, which is conservative.
		b := p.own.makeBusy()
		if b.carry == 0 {
			b.carryExpiry = p.own.expiry
		}
		b.carry = left
		b.takenAtCarry = p.taken()
	}
	p.tokens.Add(n)
	p.own.credited += n
	p.own.expiry = expiry
}

func (m *Manager) init(p *Pool, now mono) {
	if p.own.initialized {
		return
	}
	r := p.Rule()
	p.own.initialized = true
	p.own.lastSample, p.own.lastActive = now, now
	// Before any rate is known, ask for this node's share of one refresh
	// interval: a hot new key needs it, a cold one returns it when idle.
	share := r.Rate() * r.Lease.Refresh.Seconds() / float64(max(m.cfg.Nodes(), 1))
	m.resize(p, r, share)
}

func (m *Manager) resize(p *Pool, r *rules.Rule, tokens float64) {
	size := min(max(int64(math.Ceil(tokens)), r.Lease.Min), r.Lease.Max)
	p.own.size = size
	p.low.Store(watermark(size))
}

// watermark is the level below which a key without a share asks for a
// refill: half its lease, or, for a lease of a few tokens (the long tail of
// keys), the whole of it. A lease of two tokens with a watermark of one
// runs dry whenever two requests come within a round trip, and a served
// key with a dry pool refuses: 0.927 of the ideal at 10,000 Zipf keys with
// half, 0.945 with the whole lease, for 54 and 70 Redis commands per 1,000
// admitted (the bench's keys scenario). A larger lease keeps half, so that
// a busy key does not hold twice what it needs (TestSizeFollowsRate).
func watermark(size int64) int64 {
	if size <= smallLease {
		return size
	}
	return (size + 1) / 2
}

// smallLease is the largest lease refilled as soon as a token is taken.
const smallLease = 4
