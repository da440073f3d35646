package lease

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// A lease on a token bucket carries a share of the rule's rate: the pool
// earns it locally, in the sweep, from the answer until the request's send
// time plus the TTL, while the allocator's bucket stops earning it. So a
// node keeps its part of the rate however long its round trip, where tokens
// alone could only move what the central bucket held at the moment of each
// call (at most its burst per round trip).

const (
	// shareHeadroom is how much more than its measured demand a node asks
	// for: demand is noisy, and what a share earns beyond the pool's cap is
	// given back, not lost.
	shareHeadroom = 1.25
	// shareHold bounds what a share may pile up in an idle pool: a tenth
	// of a second of it (at least one token). Across the fleet that keeps
	// rate lent ahead from turning into a spike: the worst one-second window
	// stays within the burst plus 1.1 times the rate.
	shareHold = 100 * time.Millisecond
	// renewJitter spreads renewals over [1, 1+renewJitter] refresh
	// intervals, so that nodes do not renew in step.
	renewJitter = 0.2
	// busyAtFirst is the demand a new key must show before its first
	// request leaves (requests decided on its fallback share or refused)
	// to ask for a share at once when the allocator is near.
	busyAtFirst = 2
)

// accrue moves what the pool's share earned since the last accrual into
// the pool, in whole tokens, up to the pool's cap; what the cap refuses, or
// what arrives when no lease holds the pool, is given back with the next
// Acquire. The share ends at its lease's end.
func (m *Manager) accrue(p *Pool, now mono) {
	m.wake(p, now)
	o, b := &p.own, p.own.busy
	if b == nil { // no share, nothing accrued
		return
	}
	if b.share > 0 {
		end := min(now, b.shareEnd)
		if end.After(b.shareFrom) {
			b.accrued += b.share * end.Sub(b.shareFrom).Seconds()
			b.shareFrom = end
		}
		if !now.Before(b.shareEnd) {
			b.share = 0
			p.flags.set(flagSharing, false)
		}
	}
	if b.accrued < 1 {
		return
	}
	// More than the pool's cap and the rule's capacity would only be given
	// back and capped there: a huge rate must not overflow the count.
	capacity := p.Rule().Capacity()
	whole := math.Floor(b.accrued)
	b.accrued -= whole
	n := int64(min(whole, float64(capacity+b.shareCap)))
	defer func() { b.overflow = min(b.overflow, capacity) }()
	left := p.tokens.Load()
	if left < 0 || o.expiry.IsZero() || !now.Before(o.expiry) { // evicted, or no lease to hold them
		b.overflow += n
		return
	}
	in := min(n, max(b.shareCap-left, 0))
	if in > 0 {
		p.tokens.Add(in)
		o.credited += in
	}
	b.overflow += n - in
}

// setShare starts the share a grant brought. While the request was on its
// way the pool went on earning the old share, but the allocator counted the
// new one from the moment it answered: if the new share is smaller, the
// difference over the round trip is owed, and taken back from the pool or
// from what the share earns next.
func (m *Manager) setShare(p *Pool, f *flight, g Grant, now mono) {
	b := p.own.busy
	if b == nil {
		if g.Rate <= 0 { // no share before, none now: nothing starts or is owed
			p.flags.set(flagSharing, false)
			return
		}
		b = p.own.makeBusy()
	}
	if b.share > g.Rate {
		if overlap := min(now, b.shareEnd).Sub(f.sent); overlap > 0 {
			b.accrued -= (b.share - g.Rate) * overlap.Seconds()
		}
	}
	b.share, b.shareFrom, b.shareEnd = g.Rate, now, f.sent.Add(g.TTL)
	if g.Rate > 0 {
		b.shareCap = max(int64(math.Ceil(g.Rate*shareHold.Seconds())), 1)
	}
	p.flags.set(flagSharing, g.Rate > 0 && b.shareEnd.After(now))
}

// oweInFlight turns what the key admitted from its fallback share while the
// request was in flight, beyond what the grant's tokens paid and what the
// share may keep (kept, keptInFlight), into a debt the pool pays off, from
// the tokens of later grants and from its share, before it admits anything
// more. Reported to the allocator instead, it would arrive a round trip
// later, when the central bucket had lent its burst again: a new key would
// admit two bursts in its first second.
func (m *Manager) oweInFlight(p *Pool, kept float64) {
	n := p.consumed.Swap(0)
	if n <= 0 {
		return
	}
	p.consumedSince.Store(0)
	p.own.makeBusy().accrued -= max(float64(n)-kept, 0)
}

// keptInFlight is what a fallback share earning fallbackRate may keep of
// what it admitted during a flight: what it earned while the central
// bucket was full (refill the bucket lost), and on the way back what the
// bucket stopped earning when it lent the grant's rate on arrival. The rest
// the bucket earned too and lent to the nodes that asked first: kept, eight
// nodes whose first requests arrived 50 to 300 ms apart admitted 1.11 of
// burst + rate in their first second (TestLoadedNodes, in a CI run).
//
// The node does not know when on its way the request arrived, a after it
// left, so it keeps the least over every a: the bucket was full for the
// last FullFor before arrival and below capacity for at most TTL -
// FullInTTL of the TTL before it (and, for all it knows, before that TTL);
// the rate was lent from arrival for a TTL. The least lies at a = 0, the
// flight, or a kink in between.
//
// Left: the shares of the nodes still on their way each earn limit/N, but
// while the bucket was full it lost only the rate it had not lent; if the
// nodes answered first were lent more than limit/N each (asking early,
// they share out what the others have not asked for yet), the nodes on
// their way together keep more than the bucket lost. The bound's 10% of
// the rate covers it in every test so far.
func keptInFlight(flight time.Duration, g Grant, fallbackRate float64) float64 {
	flight = max(flight, 0)
	ttl, fullFor := max(g.TTL, 0), max(g.FullFor, 0)
	below := max(ttl-g.FullInTTL, 0)
	back := min(max(g.Rate, 0), fallbackRate)
	kept := math.Inf(1)
	for _, a := range [...]time.Duration{0, fullFor, fullFor + below, ttl, flight - ttl, flight} {
		a = min(max(a, 0), flight)
		notFull := min(max(a-fullFor, 0), below+max(a-ttl, 0))
		kept = min(kept, back*min(flight-a, ttl).Seconds()+fallbackRate*(a-notFull).Seconds())
	}
	return kept
}

// settleOwed pays what the pool owes out of the tokens it holds.
func (m *Manager) settleOwed(p *Pool) {
	if b := p.own.busy; b != nil && b.accrued < 0 {
		b.accrued += float64(p.remove(int64(math.Ceil(-b.accrued))))
	}
}

// wantRate is the share of the rule's rate a request asks for: the node's
// demand with some headroom, nothing once the key has gone quiet (that is
// how a share is given back). A new key asks for the node's part of the
// rule's rate at once if it was busy before its first request left, or if
// the allocator is far (a round trip of half a refresh or more) or not yet
// measured: a hot new key far away cannot wait a round trip more for it
// (waiting cost 0.81 of the ideal at 1 s, TestDistance). Near, a key asks
// for its share with a later request, once its demand shows it needs one
// (tokensSuffice): the long tail of keys touched now and then admitted 0.85
// of the ideal when each first lease lent a share (the bench's keys
// scenario, 10,000 Zipf keys), 0.93 without.
func (m *Manager) wantRate(p *Pool, r *rules.Rule, now mono) float64 {
	if m.cfg.TokensOnly || r.Algorithm != rules.TokenBucket {
		return 0
	}
	o := &p.own
	switch {
	case !o.sent && (p.missed.Load() >= busyAtFirst || m.farOrUnknown(r)):
		return r.Rate() / float64(max(m.cfg.Nodes(), 1))
	case !o.sent, m.quiet(p, r, now), m.tokensSuffice(p, r):
		return 0
	}
	// The fast estimate leads when demand surges (load moving onto this
	// node), but only once it rests on a few requests: a slow key's fast
	// estimate swings between nothing and several times its rate.
	rate, fast := float64(o.rate), float64(o.fastRate)
	if fast > 2*rate && fast*(2*m.cfg.Sweep).Seconds() >= 4 {
		rate = fast
	}
	return min(shareHeadroom*rate, r.Rate())
}

// wantTokens is the tokens a request asks for: the lease size, but nothing
// for a key whose share keeps its pool above the watermark.
func (m *Manager) wantTokens(p *Pool) int64 {
	if p.own.shareRate() > 0 && p.tokens.Load() >= p.low.Load() {
		return 0
	}
	return p.own.size
}

// tokensSuffice reports whether leases of tokens serve the key as well as
// a share would, so that it asks for none (and gives back the one it has):
// the allocator is near, the key's last grant was whole, and the key's
// demand over the fleet (this node's, times its holders or the fleet's
// size, whichever is larger) is under the rule's rate, so its central
// bucket does not run dry and each refill comes back whole within a round
// trip. A share is for a key at its limit, or far away: its pool holds a
// tenth of a second of its rate (shareHold), a token for a key at a few
// requests a second on a node, where a lease of tokens holds a refresh
// interval of the node's part of the rule and asks for more as soon as one
// is taken. The bench's keys scenario (10,000 Zipf keys, 50/s each, 8
// nodes) admitted 0.950 of the ideal with a share on every key that asked
// twice, 0.971 with this test at half the rate and 0.986 at the rate (the
// keys under half their limit lost 2.4%, 0.8% and 0.2% of the ideal, those
// near it 2.4%, 1.9% and 1.0%). A grant that fell short keeps the share: a
// hot key's rate estimate still climbs after its first lease (an average
// over 500 ms), and without that test a hot key 50 ms away lost its share
// at its second request (TestDistance at 50 ms: 0.985 of the ideal instead
// of 0.994).
func (m *Manager) tokensSuffice(p *Pool, r *rules.Rule) bool {
	return !p.own.short && !m.farOrUnknown(r) && float64(p.own.rate)*float64(max(p.Holders(), m.cfg.Nodes(), 1)) < r.Rate()
}

// quiet reports whether the key has had no demand for long enough that its
// share should go back: three of its own inter-arrival times, and at least
// two sweeps; a busy key gives its share back within a few sweeps, a slow
// one is not taken for gone between two requests.
func (m *Manager) quiet(p *Pool, r *rules.Rule, now mono) bool {
	return now.Sub(p.own.lastActive) >= m.quietAfter(p, r)
}

// quietAfter is how long after its last demand a key is quiet.
func (m *Manager) quietAfter(p *Pool, r *rules.Rule) time.Duration {
	after := 2 * m.cfg.Sweep
	if rate := float64(p.own.rate); rate > 0 {
		after = max(after, time.Duration(min(3/rate, 3600)*float64(time.Second)))
	}
	return min(after, r.Lease.TTL/2)
}

// renewAfter is how long after sending a request the node renews its share:
// about a refresh interval, but early enough that the renewal's round trip,
// with a quarter more for its jitter, ends before the lease does.
func (m *Manager) renewAfter(r *rules.Rule) time.Duration {
	rtt := m.roundTrip()
	if 2*rtt > r.Lease.TTL {
		m.warnShortTTL(r, rtt)
	}
	d := time.Duration(float64(r.Lease.Refresh) * (1 + renewJitter*rand.Float64()))
	return max(min(d, m.latestRenewal(r)), 0)
}

// latestRenewal is how long after a request the next may leave and still
// be answered, with a quarter more than the round trip for its jitter and a
// sweep to spare, before the lease ends.
func (m *Manager) latestRenewal(r *rules.Rule) time.Duration {
	return r.Lease.TTL - m.roundTrip()*5/4 - m.cfg.Sweep
}

// warnShortTTL logs, once per rule, that its leases end before a renewal
// can come back.
func (m *Manager) warnShortTTL(r *rules.Rule, rtt time.Duration) {
	m.tablesMu.Lock()
	t := m.tables[r.Name]
	m.tablesMu.Unlock()
	if t == nil || t.warnedTTL.Swap(true) {
		return
	}
	m.cfg.Logger.Warn("allot: lease.ttl is shorter than two round trips to the allocator: leases end before their renewals arrive and the node falls back between them; raise lease.ttl",
		"rule", r.Name, "ttl", r.Lease.TTL, "round_trip", rtt, "suggested_ttl", (4 * rtt).Round(time.Millisecond))
}

// observeRoundTrip folds one Acquire's duration into the average.
func (m *Manager) observeRoundTrip(took time.Duration) {
	if m.rtt == 0 {
		m.rtt = took
		return
	}
	m.rtt += (took - m.rtt) / 8
}

// farOrUnknown reports whether the allocator's round trip is half the
// rule's refresh interval or more, or not measured yet.
func (m *Manager) farOrUnknown(r *rules.Rule) bool {
	rtt := m.roundTrip()
	return rtt <= 0 || 2*rtt >= r.Lease.Refresh
}

// roundTrip is the round trip renewals plan for.
func (m *Manager) roundTrip() time.Duration {
	if m.cfg.RoundTrip != nil {
		return m.cfg.RoundTrip()
	}
	return m.rtt
}
