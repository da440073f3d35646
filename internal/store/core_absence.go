package store

import (
	"math"

	"github.com/allot-dev/allot/internal/mutate"
	"github.com/allot-dev/allot/internal/rules"
)

// Absent holders, part of the reference semantics (see core.go;
// docs/bounds.md, rule 4). A holder whose lease ends without a Release
// (until ≤ now) has crashed, or is cut off from the allocator and admits
// on its fallback allowance, which starts where its lease ended: a token
// bucket's r/n, a window's l/n a window, n being the holder count the
// store last told it. The store keeps it as absent for an absence
// (absenceUS) and reserves that share, so that what it admits there is
// not also lent to the rest of the fleet; when it comes back, what it
// reports having admitted is covered by the reservation, and only the
// rest is debited. A Release forgets a holder at once: it is not on its
// fallback. An absent holder counts among the key's holders (Lease.Holders
// and capConsumed's divisor: the fleet still has that many nodes that may
// admit the key) and wants nothing of the grants.
//
// The reservation does not end when the holder's request arrives: the
// node learns that the allocator answers again only from the answer, and
// admits on its fallback until then (a round trip, or more when the answer
// is lost), reporting what its grant does not pay for with its next
// request. So a holder back from a reserved absence (markBack: an absent
// holder whose request reports fallback admissions, or was sent on the
// fallback, AcquireRequest.OnFallback) keeps its reservation
// until its next request: a token bucket withholds its r/n from when it
// came back and covers its next report up to that, and a window keeps back
// what is left of its l/n in the window it came back in. The return itself
// is granted and lent a share as before: the node pays for what its
// fallback admitted in flight from that grant first (lease.Core.grant),
// and a bucket withholds both over the round trip, the price of not
// knowing when the answer arrived. A return that reports nothing is not
// taken for one from a fallback (a node that renews late, not cut off,
// would have its share withheld for nothing, and a fixed window's every
// renewal in a new window is such a return), nor is, for a window, one
// whose lease ended in the window it is back in (it does not fall back
// there, rule 5). What the return is granted does not use up what is kept
// back: the fallback admits until the answer arrives whatever it brings.

// present reports whether h holds a lease at now.
func (h holder) present(now int64) bool { return h.until > now }

// known reports whether the store still keeps h at now, present or absent.
func (h holder) known(now, absence int64) bool { return h.until+absence > now }

// reserving reports whether the store reserves h's fallback at now: it is
// absent, or back and its next request has not come. Either lasts until
// its absence ends.
func (h holder) reserving(now, absence int64) bool {
	return h.known(now, absence) && (h.back > 0 || !h.present(now))
}

// reservedSince is when h's reservation started: when its lease ended, or,
// back, when it came back (its reservation went on from its absence).
func (h holder) reservedSince() int64 {
	if h.back > 0 {
		return h.back
	}
	return h.until
}

// shareN is what h's fallback divides by: the count its last lease told it,
// or, back, the smaller of that and the count it was told before, which
// its fallback divides by until the return's answer arrives.
func (h holder) shareN() int64 {
	if h.back > 0 {
		return min(h.n, h.backN)
	}
	return h.n
}

// reservedRate is the fallback rate r/n the store reserves for h while it
// is absent or back, tokens per second.
func (h holder) reservedRate(r *rules.Rule) float64 { return ratePerSecond(r) / float64(h.shareN()) }

// reserved adds to withheld what the reservations kept from a bucket's
// refill over (from, now]: each holder's r/n from when its reservation
// started to when its absence ends, as refill withholds a lent share.
func (st *state) reserved(r *rules.Rule, from, now int64, withheld []float64) []float64 {
	if mutate.On(mutate.ForgiveLate) {
		return withheld
	}
	a := absenceUS(r)
	for _, h := range st.holders {
		if start, end := max(h.reservedSince(), from), min(now, h.until+a); end > start {
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
		if h.reserving(now, a) {
			rates = append(rates, h.reservedRate(r))
		}
	}
	return sortedSum(rates)
}

// cover is what node, if it comes back from an absence or makes its next
// request after it came back, had reserved for its fallback since its
// reservation started: the consumption it reports is covered up to that,
// as the bucket never earned it. 0 for a holder with no reservation.
func (st *state) cover(r *rules.Rule, node string, now int64) float64 {
	h, ok := st.holders[node]
	if !ok || !h.reserving(now, absenceUS(r)) || mutate.On(mutate.ForgiveLate) {
		return 0
	}
	return h.reservedRate(r) * float64(max(now-h.reservedSince(), 0)) / 1e6
}

// markBack records, once req's node's request at now has been granted,
// whether it came back from a reserved absence (prev, if had, is its
// record before the request): when it came back and
// what its fallback divides by, and for a window (epoch the current one)
// what the node has reported in it since it came back (counted, this
// request's). A window holder comes back so when the
// store reserved for it in this window: its lease ended by the window's
// start, or it came back in this window before and its lease ended again
// (its answer may have been lost).
func (st *state) markBack(r *rules.Rule, req *AcquireRequest, prev holder, had bool, now, epoch int64, counted float64) {
	if !had || !prev.known(now, absenceUS(r)) || mutate.On(mutate.ForgiveLate) {
		return
	}
	p := periodUS(r)
	end := prev.until
	if r.Algorithm != rules.TokenBucket {
		end = min(end, (prev.epoch+1)*p) // a window's lease ends with its window
	}
	// (A return that reports nothing and was not sent on the fallback is
	// not taken for one: a fixed window's every lease ends with its
	// window, so every renewal in a new window would keep its holder's l/n
	// back from the others until its next request, which cost a fleet
	// 200 ms away a third of each window. A node that took the allocator
	// for down when it sent says so: its fallback may admit while the
	// request is on its way, before anything was there to report.)
	if end > now || (req.Consumed <= 0 && !req.OnFallback) {
		return
	}
	h := st.holders[req.Node]
	h.back, h.backN = now, prev.shareN()
	if r.Algorithm != rules.TokenBucket {
		switch {
		case end <= epoch*p:
			h.backUsed = counted
		case prev.back > 0 && prev.epoch == epoch:
			h.backUsed = prev.backUsed + counted
		default:
			return
		}
	}
	st.holders[req.Node] = h
}

// windowReserve is what a window keeps back for the holders that may fall
// back in it (holder.windowReserved, summed).
func (st *state) windowReserve(r *rules.Rule, now, start int64) float64 {
	var xs []float64
	for _, h := range st.holders {
		if x := h.windowReserved(r, now, start); x > 0 {
			xs = append(xs, x)
		}
	}
	return sortedSum(xs)
}

// windowReserved is what the window starting at start keeps back at now
// for h: its l/n if its lease ended by the window's start (a node does not
// fall back in a window in which it held a lease) and its absence lasts
// past now, or what is left of its l/n if it is back in this window. A
// fixed window's lease ends with its window, if not before: its holder may
// fall back from the next one.
func (h holder) windowReserved(r *rules.Rule, now, start int64) float64 {
	a, p := absenceUS(r), periodUS(r)
	if !h.known(now, a) || mutate.On(mutate.ForgiveLate) {
		return 0
	}
	share := float64(r.Limit) / float64(h.shareN())
	end := min(h.until, (h.epoch+1)*p) // a window's lease ends with its window
	switch {
	case end <= start:
		return share
	case h.back > 0 && h.epoch == start/p:
		return math.Max(share-h.backUsed, 0)
	}
	return 0
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
