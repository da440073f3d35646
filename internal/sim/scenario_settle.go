package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sim/oracle"
)

// A share of the drawn scenarios settle their requests after the work
// (settle.go): each stream of a rule of tokens settles what it admits after
// 10-200 ms at 1-50 times its estimate, 1-5 times, or 0.5-2 times (below it
// too). The draw is of its own randomness (settleSalt), as the concurrency
// rule's is, so a scenario that does not draw it is the one it was.
const (
	settleShare = 12
	settleSalt  = 0x5e77 + 20
)

// settleInSeeds draws settling in a share of the seeds.
const settleInSeeds = true

func drawSettle(seed uint64, s *Scenario) {
	if !settleInSeeds || rand.New(rand.NewPCG(seed, settleSalt^0x5107)).IntN(settleShare) != 0 {
		return
	}
	rng := rand.New(rand.NewPCG(seed, settleSalt))
	lohi := pick(rng, [2]float64{1, 50}, [2]float64{1, 5}, [2]float64{0.5, 2})
	d := &settleDraw{holdMin: 10 * time.Millisecond, holdMax: 200 * time.Millisecond, lo: lohi[0], hi: lohi[1],
		rng: rand.New(rand.NewPCG(rng.Uint64(), settleSalt))}
	for _, st := range s.Load.streams {
		if r, _ := s.Rules.Get(st.rule); r != nil && !r.IsConcurrency() {
			st.settle = d
		}
	}
	cut := slices.ContainsFunc(s.kinds, func(k string) bool {
		return k == "cut" || k == "cut-group" || k == "store-cut" || k == "allocator-restart"
	})
	for _, r := range s.Rules.Rules() {
		if !r.IsConcurrency() {
			r.MaxDebt = rules.MaxDebtOf(d.debt(r, cut))
		}
	}
	s.Settles = true
	s.label("settle", "(%g-%gx after %v-%v)", d.lo, d.hi, d.holdMin, d.holdMax)
}

// debt is a max_debt for r that its callers, settling as d draws, cannot
// owe more than at once: docs/bounds.md's bounds with D hold only then
// (what passes D is dropped, uncounted), and the oracle says when a run's
// callers owed more (Oracle.Owes). They owe at most hi - 1 times what was
// admitted in a hold: for a token bucket, what a hold admits of rule 2's
// b + r·(hold + ttl); for a window, two windows' limits (a hold may span
// the end of one). A reload that scales the limit up keeps it, and the
// oracle says when that was too little. With nodes cut off (cut), a
// token bucket's hold may admit a burst and a hold of the rate more: the
// fallbacks of nodes that never held the key, which no reservation
// covers (docs/bounds.md, "A key a cut-off node never held"; seed 67920's
// callers owed 18,810 at once against b + r·(hold + ttl)'s 18,800).
func (d *settleDraw) debt(r *rules.Rule, cut bool) int64 {
	per := max(d.hi-1, 0)
	admitted := 2 * float64(r.Limit)
	if r.Algorithm == rules.TokenBucket {
		admitted = float64(r.Burst) + r.Rate()*(d.holdMax+r.Lease.TTL).Seconds()
		if cut {
			admitted += float64(r.Burst) + r.Rate()*d.holdMax.Seconds()
		}
	}
	return int64(math.Ceil(per * admitted))
}

// oracleRule is the package's oracleRule, saying whether the rule settles.
func (w *World) oracleRule(r *rules.Rule) oracle.Rule {
	o := oracleRule(r)
	o.Settles = w.sc.Settles
	if r.MaxDebt != nil {
		o.MaxDebt, o.MaxDebtSet = *r.MaxDebt, true
	}
	return o
}
