package sim

import (
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sim/oracle"
)

// Costs settled after the work (client.Reservation.Settle): a stream whose
// settle is set settles each request it admits, on the estimate that is its
// cost, after a hold drawn from [holdMin, holdMax] at an actual cost of lo
// to hi times the estimate (drawn evenly, rounded). It draws from its own
// generator: the world's draws, and so every other event, stay as they are.
type settleDraw struct {
	holdMin, holdMax time.Duration
	lo, hi           float64
	rng              *rand.Rand
	// owed is what the callers owe above their estimates now, over every
	// key the draw settles, and maxOwed the most they owed at once.
	owed, maxOwed int64
}

func (d *settleDraw) hold() time.Duration {
	return d.holdMin + time.Duration(d.rng.Int64N(int64(d.holdMax-d.holdMin)+1))
}

func (d *settleDraw) actual(est int64) int64 {
	m := d.lo + (d.hi-d.lo)*d.rng.Float64()
	return max(int64(m*float64(est)+0.5), 0)
}

// settlement is one admitted request to settle, and where its tokens came
// from: a key's lease (its verdict), a strict rule's fallback allowance, or
// the allocator's Check.
type settlement struct {
	rule, key string
	est       int64
	k         *lease.KeyLease
	v         lease.Verdict
	allowance *fallback.Allowance
	mode      oracle.Mode
}

// settleLater settles s after the drawn hold, on the node that admitted it
// (a node that crashed since took its callers with it).
func (n *node) settleLater(d *settleDraw, s settlement) {
	if d == nil {
		return
	}
	w, gen := n.w, n.gen
	hold, actual := d.hold(), d.actual(s.est)
	owed := actual - s.est
	if owed > 0 {
		d.owed += owed
		d.maxOwed = max(d.maxOwed, d.owed)
		w.oracle.Owes(w.now, n.i, s.rule, s.key, owed)
	}
	w.after(hold, func() {
		if owed > 0 {
			d.owed -= owed
			w.oracle.Owes(w.now, n.i, s.rule, s.key, -owed)
		}
		if n.gen == gen && n.alive {
			n.settle(s, actual)
		}
	})
}

// settle does what Reservation.Settle does: the difference from the
// estimate charged (KeyLease.Charge, the fallback allowance's Charge, or an
// Acquire that carries it alone for a strict rule's Check) or given back,
// never more than was reserved. The oracle is told what the work cost
// above the estimate, all of it: what the node or the store left uncounted
// was used all the same.
func (n *node) settle(s settlement, actual int64) {
	w := n.w
	diff := actual - s.est
	w.stats.Settled++
	m := n.mono()
	r, _ := w.rules.Get(s.rule)
	switch {
	case diff < 0:
		back := min(-diff, s.est)
		switch {
		case s.k != nil:
			// What the lease took back it holds again, unspent, for the
			// returns check (a fallback allowance's refund is none of it).
			if got := s.k.Undo(s.v, back); got > 0 && s.mode == oracle.Lease {
				w.oracle.Undone(w.now, n.i, s.rule, s.key, got)
			}
		case s.allowance != nil:
			s.allowance.Refund(back)
		}
		n.turn()
		return
	case diff == 0:
		return
	}
	counted := diff
	switch {
	case s.k != nil:
		counted = diff - n.chargeLease(s, diff, m)
	case s.allowance != nil:
		got, _ := s.allowance.Charge(r, m, diff)
		if got > 0 {
			n.debts.Add(s.rule, s.key, got, n.clk.wall(n.w.now))
		}
		counted = got
	default: // a strict rule's Check: one Acquire that carries it alone
		n.settleStrict(r, s.key, diff)
	}
	w.stats.SettledExtra += diff
	w.stats.SettledDropped += diff - counted
	w.oracle.Settled(w.now, w.store.at(w.now), n.i, s.rule, s.key, diff, s.mode)
	n.turn() // the debt travels with the key's next request
}

// chargeLease is client.chargeLease: the key's new lease pays when the one
// the tokens came from has left its table. It returns what went uncounted.
func (n *node) chargeLease(s settlement, diff int64, m time.Duration) int64 {
	dropped, gone := s.k.Charge(s.v, diff, m)
	for range 3 {
		if !gone {
			break
		}
		t := n.tables[s.rule]
		if t == nil {
			break
		}
		k := t.Key(s.key)
		if k == nil {
			break
		}
		dropped, gone = k.Charge(lease.Verdict{Allowed: true}, diff, m)
	}
	if gone {
		return diff
	}
	return dropped
}

// settleStrict sends a strict rule's settled tokens in one Acquire, kept
// for the next report when it fails.
func (n *node) settleStrict(r *rules.Rule, key string, diff int64) {
	w, gen := n.w, n.gen
	reqs := []lease.Request{{Rule: r.Name, Key: key, Settled: diff}}
	req := lease.AcquireProto(n.id, reqs)
	w.net.send(n.i, func() {
		if _, err := w.alloc.acquire(req); err != nil && n.gen == gen {
			n.debts.AddSettled(r.Name, key, diff, n.clk.wall(w.now))
		}
	})
}
