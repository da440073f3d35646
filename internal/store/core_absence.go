package store

import (
	"github.com/allot-dev/allot/internal/mutate"
	"github.com/allot-dev/allot/internal/rules"
)

// Absent holders, part of the reference semantics (see core.go;
// docs/bounds.md, rule 4). A holder whose lease ends without a Release
// (until ≤ now) has crashed, or is cut off from the allocator and admits
// on its fallback share, which starts where its lease ended: a token
// bucket's r/n, a window's l/n a window, n being the holder count the
// store last told it. The store keeps it as absent for an absence
// (absenceUS) and reserves that share, so that what it admits there is
// not also lent to the rest of the fleet; when it comes back, what it
// reports having admitted is covered by the reservation, and only the
// rest is debited. A Release forgets a holder at once: it is not on its
// fallback. An absent holder counts among the key's holders (Lease.Holders
// and capConsumed's divisor: the fleet still has that many nodes that may
// admit the key) and wants nothing of the grants.

// present reports whether h holds a lease at now.
func (h holder) present(now int64) bool { return h.until > now }

// known reports whether the store still keeps h at now, present or absent.
func (h holder) known(now, absence int64) bool { return h.until+absence > now }

// absentAt reports whether h is absent at now: its lease ended, its
// absence has not.
func (h holder) absentAt(now, absence int64) bool { return !h.present(now) && h.known(now, absence) }

// reservedRate is the fallback rate r/n the store reserves for an absent
// holder, tokens per second.
func (h holder) reservedRate(r *rules.Rule) float64 { return ratePerSecond(r) / float64(h.n) }

// reserved adds to withheld what the absent holders' reservations kept
// from a bucket's refill over (from, now]: each one's r/n from when its
// lease ended to when its absence ends, as refill withholds a lent share.
func (st *state) reserved(r *rules.Rule, from, now int64, withheld []float64) []float64 {
	if mutate.On(mutate.ForgiveLate) {
		return withheld
	}
	a := absenceUS(r)
	for _, h := range st.holders {
		if start, end := max(h.until, from), min(now, h.until+a); end > start {
			withheld = append(withheld, h.reservedRate(r)*float64(end-start)/1e6)
		}
	}
	return withheld
}

// reservedRates is the sum of the reservations active at now, tokens per
// second.
func (st *state) reservedRates(r *rules.Rule, now int64) float64 {
	if mutate.On(mutate.ForgiveLate) {
		return 0
	}
	a := absenceUS(r)
	var rates []float64
	for _, h := range st.holders {
		if h.absentAt(now, a) {
			rates = append(rates, h.reservedRate(r))
		}
	}
	return sortedSum(rates)
}

// cover is what node, if it comes back from an absence, had reserved for
// its fallback since its lease ended: the consumption it reports is
// covered up to that, as the bucket never earned it. 0 for a holder that
// was not absent.
func (st *state) cover(r *rules.Rule, node string, now int64) float64 {
	h, ok := st.holders[node]
	if !ok || !h.absentAt(now, absenceUS(r)) || mutate.On(mutate.ForgiveLate) {
		return 0
	}
	return h.reservedRate(r) * float64(now-h.until) / 1e6
}

// windowReserve is what a window keeps back for the absent holders that
// may fall back in it: l/n each, for each whose lease ended by the
// window's start (a node does not fall back in a window in which it held a
// lease) and whose absence lasts past now. A fixed window's lease ends with
// its window, if not before: its holder may fall back from the next one.
func (st *state) windowReserve(r *rules.Rule, now, start int64) float64 {
	if mutate.On(mutate.ForgiveLate) {
		return 0
	}
	a := absenceUS(r)
	var xs []float64
	for _, h := range st.holders {
		end := min(h.until, (h.epoch+1)*periodUS(r)) // a window's lease ends with its window
		if end <= start && h.known(now, a) {
			xs = append(xs, float64(r.Limit)/float64(h.n))
		}
	}
	return sortedSum(xs)
}

// keptUntil is when the last holder's absence ends, 0 without holders: a
// state expires no earlier, or it would forget its absent holders and
// their reservations with it.
func (st *state) keptUntil(r *rules.Rule) int64 {
	a, until := absenceUS(r), int64(0)
	for _, h := range st.holders {
		until = max(until, h.until+a)
	}
	return until
}
