package store

import (
	"github.com/allot-dev/allot/internal/mutate"
	"math"
	"slices"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// The holders' part of the reference semantics (see core.go): who holds a
// lease on a key, the tokens they may give back, and their fair shares of
// tokens and of the rate.

// hold records node as a holder wanting want tokens and wantRate tokens per
// second until now+ttl, forgets the holders whose absence has ended, and
// returns the wants of the other present holders, the count of the
// holders, absent ones included, and what the node's fallback is to divide
// by (fallbackNodes). It records as the node's n the least of that and
// what the node said its fallback divides by (said, 0 when it did not
// say), which it may go on using until this answer arrives. An absent
// holder wants nothing: its fallback's part is reserved apart
// (core_absence.go). Its share, if any, is lendRate's.
func (st *state) hold(r *rules.Rule, node string, want int64, wantRate float64, now, ttl int64, held float64, epoch, said int64) (others []int64, count int, told int64) {
	if st.holders == nil {
		st.holders = make(map[string]holder)
	}
	a := absenceUS(r)
	count = 1
	var parts []float64
	for n, h := range st.holders {
		switch {
		case !h.known(now, a):
			delete(st.holders, n)
		case n != node:
			if h.present(now) {
				others = append(others, h.want)
			}
			parts = append(parts, 1/float64(max(h.n, 1)))
			count++
		}
	}
	told = fallbackNodes(count, sortedSum(parts))
	if mutate.On(mutate.TellHolders) {
		told = int64(count)
	}
	n := told
	if said > 0 {
		n = min(n, said)
	}
	st.holders[node] = holder{until: now + ttl, want: want, wantRate: wantRate, held: held, epoch: epoch, n: n}
	return others, count, told
}

// maxFallbackNodes is what a holder the others' fallback allowances leave no
// room for is told to divide by: its fallback admits nothing.
const maxFallbackNodes = math.MaxInt32

// fallbackNodes is what a holder's fallback is to divide the rule by when
// the key has count holders and the others' fallbacks may admit the part
// taken of it (the sum of 1/n over them): count, or more, so that the
// parts sum to no more than the whole rule. A holder told a count when the
// key had fewer holders (the first of a cold fleet is told 1) keeps its
// larger part until it asks again, and a newcomer meanwhile gets what is
// left (docs/bounds.md, rule 5). The slack forgives the sum's rounding.
func fallbackNodes(count int, taken float64) int64 {
	rest := 1 - taken
	if rest <= 1e-9 {
		return maxFallbackNodes
	}
	return min(max(int64(count), int64(math.Ceil(1/rest-1e-9))), maxFallbackNodes)
}

// givable is what node may give back at now of what it was lent in window
// epoch: its grants not given back yet, and what its share earned since
// its last request, while its lease lasts. A node that holds no lease gives
// back nothing: a Release or a return cannot credit tokens never lent.
func (st *state) givable(node string, now, ttl, epoch int64) float64 {
	h, ok := st.holders[node]
	if !ok || h.until <= now || h.epoch != epoch {
		return 0
	}
	return h.held + h.rate*float64(max(min(now, h.until)-(h.until-ttl), 0))/1e6
}

// giveBack credits what node returns: at most what it says it holds
// unspent (held, its return included), and at most what it may give back
// (what it was lent, which it may have spent). A return without held, from
// a node that predates it, credits nothing: the store cannot tell tokens
// given back from tokens spent, and crediting spent tokens lends them
// again (docs/bounds.md, rule 3). It returns what node may still give
// back: what it holds, as far as the store can tell, less the credit. Of
// a node that does not say, the store counts none: what it was lent
// before would otherwise add up over its leases, and a token bucket's
// ceiling (core_bucket.go) would fall to nothing under such a node's busy
// key; its next grant it counts, as it may not have been spent.
func (st *state) giveBack(node string, now, ttl, epoch, tokens int64, held heldReport) (credited int64, left float64) {
	can := st.givable(node, now, ttl, epoch)
	if mutate.On(mutate.CreditLent) {
		held = heldReport{known: true, n: math.MaxInt64}
	}
	if !held.known {
		return 0, 0
	}
	credited = min(tokens, held.n, int64(math.Floor(can)))
	return credited, held.bound(can) - float64(credited)
}

// heldReport is what a node said it holds unspent, if it said.
type heldReport struct {
	n     int64
	known bool
}

func reportOf(held int64, known bool) heldReport { return heldReport{max(held, 0), known} }

// arg is the report as the scripts read it: -1 when the node did not say.
func (h heldReport) arg() int64 {
	if !h.known {
		return -1
	}
	return h.n
}

// bound caps what the store believes a holder holds by what it says: it
// spent the rest.
func (h heldReport) bound(can float64) float64 {
	if !h.known {
		return can
	}
	return math.Min(can, float64(h.n))
}

// capConsumed bounds what a node reports as admitted without a lease by
// what its fallback allowance could have admitted since age ago: the burst and
// the rate divided over the key's holders, absent ones and the node
// counted, or by what the store last told the node's fallback to divide
// by if fewer (the first holder of a cold fleet, told 1, may admit the
// whole rule on its fallback, and is debited for it). The age counts
// up to an absence (rules.LeaseTuning.Absence): consumption is debited in
// full however late, so without a bound on the age one report of an old
// outage could put the key in debt for as long as it claims. No report can
// put another holder's key in debt beyond that.
func (st *state) capConsumed(r *rules.Rule, node string, now, consumed int64, age time.Duration) int64 {
	if consumed <= 0 {
		return 0
	}
	n, a := int64(1), absenceUS(r)
	for h, o := range st.holders {
		if h != node && o.known(now, a) {
			n++
		}
	}
	if self, ok := st.holders[node]; ok && self.known(now, a) {
		n = min(n, max(self.n, 1))
	}
	ageUS := min(age.Microseconds(), a)
	limit := float64(r.Capacity())/float64(n) + float64(ageUS)*ratePerUS(r)/float64(n)
	return min(consumed, int64(math.Ceil(math.Min(limit, maxWaitUS))))
}

// lendRate lends node, which hold has just recorded, a share of the rule's
// rate for its lease: the water-filling level of the present holders'
// wanted rates, and never more than the other holders' shares leave, so
// that the shares sum to at most the rate at every instant (Doorman's
// rule: a holder whose fair share shrank keeps its old one until it
// renews, and the others grow as it does). A bucket in debt lends none: a
// debt is paid before anything more is admitted, or settled costs
// (core_debt.go) would go on being admitted beside a debt a TTL of the
// rate cannot repay, and run it past the rule's max debt. The holders'
// reservations, absent or back from an absence, are not lent
// (core_absence.go).
func (st *state) lendRate(r *rules.Rule, node string, now int64) float64 {
	self := st.holders[node]
	if self.wantRate <= 0 {
		return 0
	}
	rate := ratePerSecond(r)
	avail := rate - st.reservedRates(r, now)
	if st.bucket.tokens < 0 {
		avail = 0
	}
	var wants, held []float64
	for n, h := range st.holders {
		if !h.present(now) { // its share ended with its lease
			continue
		}
		wants = append(wants, h.wantRate)
		if n != node {
			held = append(held, h.rate)
		}
	}
	share := math.Min(self.wantRate, waterLevel(avail, wants))
	share = math.Max(math.Min(share, avail-sortedSum(held)), 0)
	self.rate = share
	st.holders[node] = self
	return share
}

// waterLevel is the level at which the wants, each capped at it, sum to
// avail: infinite when they all fit.
func waterLevel(avail float64, wants []float64) float64 {
	slices.Sort(wants)
	rem, n := avail, float64(len(wants))
	for _, w := range wants {
		if share := rem / n; w > share {
			return share
		}
		rem -= w
		n--
	}
	return math.Inf(1)
}

// fairGrant lends at most want and at most avail. When the holders together
// want more than avail, it water-fills: every holder may take up to the
// level at which the wants, each capped at the level, sum to avail. So a
// greedy node gets what the modest ones leave, never their share. A share
// that rounds to zero still lends one token, so a tiny limit spread over many
// holders cannot lock every one of them out.
func fairGrant(avail, want int64, others []int64) int64 {
	if want <= 0 || avail <= 0 {
		return 0
	}
	total := want
	for _, w := range others {
		total += w
	}
	if total <= avail {
		return want
	}
	wants := make([]float64, 0, len(others)+1)
	for _, w := range others {
		wants = append(wants, float64(w))
	}
	level := waterLevel(float64(avail), append(wants, float64(want)))
	g := min(want, int64(math.Floor(math.Min(level, float64(want)))))
	if g < 1 {
		g = 1
	}
	return g
}

// unmet records what a window holder's request was not lent as its want:
// a window's room does not refill, so a holder lent all it asked has no
// claim on the rest of the window until it asks again. Water-filled at its
// whole want, every holder renewing in turn would take a share of what the
// others, already served, were deemed to want, and a window's last room
// would be lent an eighth of it at a time, too late to be spent.
func (st *state) unmet(node string, want int64) {
	h := st.holders[node]
	h.want = max(want, 0)
	st.holders[node] = h
}

// lent adds a grant to what the holder may give back.
func (st *state) lent(node string, g int64) {
	h := st.holders[node]
	h.held += float64(g)
	st.holders[node] = h
}
