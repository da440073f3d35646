package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sim/oracle"
)

// node is one simulated node: the real lease Core and its keys, decided as
// the SDK decides them, on the node's own clocks.
type node struct {
	w          *World
	i          int
	id         string
	gen        int // its incarnation: what was sent to an older one is lost
	alive      bool
	clk        nodeClock
	core       *lease.Core
	tables     map[string]*lease.Table
	wakeAt     time.Duration // the earliest turn scheduled; -1: none
	pending    map[*lease.Call]time.Duration
	waiters    []*waiter
	rtt        time.Duration // its measure of the round trip
	allowances map[string]*fallback.Allowances
	debts      lease.StrictDebts // strict rules' fallback admissions, to report (the SDK's own)
	late       time.Duration     // a saturated CPU: its loop runs up to this late
	downAt     time.Duration     // when it last crashed
	// returned are the requests whose returns the oracle has been told of.
	returned map[flightID]bool
	slots    *slotSide // concurrency rules (slots.go); nil without any
}

// flightID names one request of a key, however often it is sent.
type flightID struct {
	rule, key string
	seq       uint64
}

// waiter is a request waiting for its key's first lease.
type waiter struct {
	rule, key string
	cost      int64
	settle    *settleDraw // settled after its work (settle.go); nil: not
	deadline  time.Duration
	done      bool
}

func newNode(w *World, i int) *node {
	n := &node{w: w, i: i, wakeAt: -1}
	n.clk = nodeClock{
		origin: time.Duration(w.rng.Int64N(int64(time.Hour))),
		drift:  (w.rng.Float64()*2 - 1) * w.sc.Drift,
		skew:   time.Duration((w.rng.Float64()*2 - 1) * float64(w.sc.Skew)),
	}
	return n
}

func (n *node) mono() time.Duration { return n.clk.mono(n.w.now) }

// boot starts the node (again, after a crash): a new Core, the rules'
// tables, nothing of what it held before.
func (n *node) boot() {
	w := n.w
	n.gen++
	n.alive = true
	if n.gen > 1 {
		w.oracle.Restarted(w.now, n.i)
	}
	n.id = fmt.Sprintf("node-%d", n.i)
	if w.sc.NewIDs && n.gen > 1 {
		n.id = fmt.Sprintf("node-%d.%d", n.i, n.gen)
	}
	n.pending = map[*lease.Call]time.Duration{}
	n.returned = map[flightID]bool{}
	n.waiters, n.debts = nil, lease.StrictDebts{}
	n.allowances = map[string]*fallback.Allowances{}
	n.core = lease.NewCore(lease.Config{
		Rand: rand.New(rand.NewPCG(w.rng.Uint64(), uint64(n.i))), Logger: quiet,
		Nodes: n.fleetSize, TokensOnly: w.sc.TokensOnly,
		RPCTimeout: n.callTimeout(),
	}, n.mono())
	// The SDK fetches the rules before it decides (client.New): the
	// allocator counts the node live, and the node learns the count. The
	// round trip is not played: the node's first Acquire follows it.
	if !w.sc.RulesLate && !w.net.cut(n.i, w.now) {
		if live, err := w.alloc.rules(n.id); err == nil {
			n.core.SawFleet(live)
		}
	}
	n.tables = map[string]*lease.Table{}
	for _, r := range w.rules.Rules() {
		n.apply(r)
	}
	n.bootSlots()
	n.wakeAt = -1
	n.turn()
}

// apply gives the node a rule (at boot, or a reload reaching it).
func (n *node) apply(r *rules.Rule) {
	if r.Leasable() {
		n.tables[r.Name] = n.core.Table(r)
	}
	n.applySlots(r)
}

func (n *node) callTimeout() time.Duration { return n.w.sc.callTimeout() }

// fleetSize is the N the node divides by before any key's hint.
func (n *node) fleetSize() int { return n.nodesFor(0) }

func (n *node) nodesFor(holders int) int {
	gossip := 0
	if n.w.sc.Gossip && !n.w.net.cut(n.i, n.w.now) {
		gossip = n.w.live()
	}
	configured := 0
	if n.w.sc.Configured {
		configured = n.w.sc.Nodes
	}
	return fallback.Nodes(gossip, holders, max(n.core.MostHolders(), n.core.Fleet()), configured)
}

// live is how many nodes the gossip pool counts now: those that run, and
// those that crashed too recently for memberlist to have noticed (about
// five seconds on its LAN configuration; the simulator's crashes last
// three at most).
func (w *World) live() int {
	c := 0
	for _, n := range w.nodes {
		if n.alive || (n.gen > 1 && w.now-n.downAt < gossipNotices) {
			c++
		}
	}
	return c
}

// gossipNotices is how long memberlist takes to declare a dead member.
const gossipNotices = 5 * time.Second

// turn runs the Core now (late, on a saturated node), sends what it asks
// and schedules its next turn.
func (n *node) turn() {
	if !n.alive {
		return
	}
	if n.late > 0 {
		gen := n.gen
		n.w.after(time.Duration(n.w.rng.Int64N(int64(n.late))), func() {
			if n.gen == gen {
				n.turnNow()
			}
		})
		return
	}
	n.turnNow()
}

func (n *node) turnNow() {
	if !n.alive {
		return
	}
	n.core.Turn(n.mono())
	calls, rels := n.core.TakeCalls()
	for _, c := range calls {
		n.send(c)
	}
	for _, rets := range rels {
		n.release(rets)
	}
	if m, ok := n.core.NextWake(); ok {
		at := n.clk.trueAt(m)
		if at <= n.w.now { // due already, and not done: the Core would spin
			at = n.w.now + time.Microsecond
		}
		if n.wakeAt < 0 || at < n.wakeAt || n.wakeAt < n.w.now {
			n.wakeAt = at
			gen := n.gen
			n.w.at(at, func() {
				if n.gen == gen && n.wakeAt == at {
					n.wakeAt = -1
					n.turn()
				}
			})
		}
	}
}

// send puts one Acquire on the network, with its timeout.
func (n *node) send(c *lease.Call) {
	w := n.w
	w.stats.Calls++
	gen, sent := n.gen, w.now
	n.pending[c] = sent
	for _, r := range c.Requests {
		// A request sent again (its answer lost) carries its return again,
		// and the store applies it once, by its sequence number.
		if id := (flightID{r.Rule, r.Key, r.Seq}); r.Returned > 0 && !n.returned[id] {
			n.returned[id] = true
			w.oracle.Returned(w.now, n.i, r.Rule, r.Key, r.Returned)
		}
	}
	req := lease.AcquireProto(n.id, c.Requests)
	w.net.send(n.i, func() {
		resp, err := w.alloc.acquire(req)
		if err == nil {
			for i, l := range resp.GetLeases() {
				r := c.Requests[i]
				w.tracef("store: node %d %s/%s seq %d at store %v: granted %d ttl %v (consumed %d, returned %d, held %d, held for %v, on fallback %v)",
					n.i, r.Rule, r.Key, r.Seq, w.store.at(w.now), l.GetGranted(), l.GetTtl().AsDuration(), r.Consumed, r.Returned, r.Held, r.HeldFor, r.OnFallback)
			}
		}
		w.net.send(n.i, func() { n.answer(gen, c, resp, err) })
	})
	w.after(c.Timeout, func() {
		if n.gen == gen {
			n.answer(gen, c, nil, context.DeadlineExceeded)
		}
	})
}

// answer brings one call's answer (or its failure) to the Core.
func (n *node) answer(gen int, c *lease.Call, resp *allotv1.AcquireResponse, err error) {
	w := n.w
	sent, ok := n.pending[c]
	if gen != n.gen || !ok {
		return // a duplicate, a late answer after the timeout, or an older incarnation's
	}
	delete(n.pending, c)
	took := w.now - sent
	if err != nil {
		w.tracef("node %d: call of %d failed: %v", n.i, len(c.Requests), err)
		n.core.Answer(c, lease.Answer{}, lease.Classify(err), took, n.mono())
	} else {
		n.rtt = took
		ans := lease.AnswerOf(resp)
		for i, g := range ans.Grants {
			r := c.Requests[i]
			w.oracle.Granted(w.now, sent, n.i, r.Rule, r.Key, g.Granted, g.Rate, g.TTL)
			w.tracef("node %d: %s/%s granted %d rate %.1f ttl %v (asked %d rate %.1f, consumed %d, returned %d, held %d)",
				n.i, r.Rule, r.Key, g.Granted, g.Rate, g.TTL, r.Want, r.WantRate, r.Consumed, r.Returned, r.Held)
		}
		n.core.Answer(c, ans, nil, took, n.mono())
	}
	n.wakeWaiters()
	n.turn()
}

// release puts one Release on the network; nothing comes back.
func (n *node) release(rets []lease.Return) {
	w := n.w
	w.stats.Releases++
	for _, r := range rets {
		if r.Tokens > 0 {
			w.oracle.Returned(w.now, n.i, r.Rule, r.Key, r.Tokens)
		}
		w.oracle.Released(w.now, n.i, r.Rule, r.Key)
	}
	req := lease.ReleaseProto(n.id, rets)
	w.net.send(n.i, func() { w.alloc.release(req) })
}

// strict decides a request of a strict rule as the SDK does: the
// allocator's Check, or, when it cannot answer in time, the key's fallback
// allowance, reported once the allocator answers again.
func (n *node) strict(r *rules.Rule, key string, cost int64, d *settleDraw) {
	w := n.w
	gen := n.gen
	decided := false
	fallbackNow := func() {
		if decided || n.gen != gen {
			return
		}
		decided = true
		if r.Failure == rules.FailClosed {
			return
		}
		s := n.allowances[r.Name]
		if s == nil {
			s = &fallback.Allowances{}
			n.allowances[r.Name] = s
		}
		m := n.mono()
		a := s.Get(r, key, m)
		res, _ := a.Decide(r, n.fleetSize(), n.core.Windows(time.Duration(n.clk.wall(w.now).UnixNano())-m), m, cost)
		a.TakeConsumed(m)
		if res.Allowed {
			n.debts.Add(r.Name, key, cost, n.clk.wall(w.now))
			n.admitted(r.Name, key, cost, oracle.Fallback, w.store.at(w.now))
			n.settleLater(d, settlement{rule: r.Name, key: key, est: cost, allowance: a, mode: oracle.Fallback})
		}
	}
	req := &allotv1.CheckRequest{Rule: r.Name, Key: key, Cost: cost}
	w.net.send(n.i, func() {
		resp, err := w.alloc.check(req)
		storeAt := w.store.at(w.now)
		w.net.send(n.i, func() {
			if decided || n.gen != gen {
				return
			}
			if err != nil {
				fallbackNow()
				return
			}
			decided = true
			if resp.GetAllowed() {
				n.admitted(r.Name, key, cost, oracle.Strict, storeAt)
				n.settleLater(d, settlement{rule: r.Name, key: key, est: cost, mode: oracle.Strict})
			}
			n.reportDebts()
		})
	})
	w.after(n.callTimeout(), fallbackNow) // the SDK's CheckTimeout, set above the round trip
}

// reportDebts sends what strict rules admitted on fallback.
func (n *node) reportDebts() {
	if !n.debts.Pending() {
		return
	}
	w := n.w
	now := n.clk.wall(w.now)
	reqs := n.debts.Take(now)
	gen := n.gen
	req := lease.AcquireProto(n.id, reqs)
	w.net.send(n.i, func() {
		if _, err := w.alloc.acquire(req); err != nil && n.gen == gen {
			n.debts.Restore(reqs, now) // reported again later
		}
	})
}

// replace closes the node as the SDK's Close does (what it admitted on
// fallback reported, every lease given back) and starts a new node, with
// a new id, in its place.
func (n *node) replace() {
	w := n.w
	if !n.alive {
		return
	}
	fin := n.core.Close(n.mono())
	for _, reqs := range [][]lease.Request{fin.Retries, fin.Reports} {
		if len(reqs) > 0 {
			req := lease.AcquireProto(n.id, reqs)
			w.net.send(n.i, func() { w.alloc.acquire(req) })
		}
	}
	if len(fin.Returns) > 0 {
		n.release(fin.Returns)
	}
	n.closeSlots()
	n.crash()
	saved := w.sc.NewIDs
	w.sc.NewIDs = true
	n.boot()
	w.sc.NewIDs = saved
}

// crash stops the node without a word: what it held is lost.
func (n *node) crash() {
	n.alive = false
	n.downAt = n.w.now
	n.gen++
	n.pending = nil
	n.waiters = nil
	n.crashSlots()
}
