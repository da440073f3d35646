package sim

import (
	"math/rand/v2"
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

// settleInSeeds is off until the oracle counts settled debt as the store
// does: the nodes' debts (up to max_debt each) can pass the store's floor
// of one max_debt, which forgives the rest without a word, and the oracle,
// told what the nodes counted, finds the fleet's bucket bounds broken
// (TestSettledCostsInTheWorld).
const settleInSeeds = false

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
	s.Settles = true
	s.label("settle", "(%g-%gx after %v-%v)", d.lo, d.hi, d.holdMin, d.holdMax)
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
