package sim

import (
	"context"
	"time"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sim/oracle"
	"github.com/allot-dev/allot/internal/slots"
	"github.com/allot-dev/allot/internal/upstream"
)

// A node's concurrency rules: the real slots.Manager, driven by the world
// (slots.Config.Stepped) as the client's loop drives it: a turn every
// Tick of the node's clock and one when a key is added; its calls go over
// the simulated network to the real allocator. A caller takes a slot and
// holds it for a time drawn from the scenario, or is refused.

// slotSide is one incarnation's slots.
type slotSide struct {
	m       *slots.Manager
	tables  map[string]*slots.Table
	pending map[*slots.Call]time.Duration // true time sent
	waiters []*slotWaiter
}

// slotWaiter is a take on a key new to the node, waiting for its first
// lease as TakeSlot does (FirstLeaseWait, the call timeout at least).
type slotWaiter struct {
	rule, key string
	k         *slots.Key
	deadline  time.Duration
}

// slotClock is the node's clocks, as the Manager reads them.
type slotClock struct{ n *node }

func (c slotClock) Now() time.Time                     { return c.n.clk.wall(c.n.w.now) }
func (c slotClock) Mono() time.Duration                { return c.n.mono() }
func (c slotClock) NewTimer(time.Duration) clock.Timer { return idleTimer{} }

// slotTick is the Manager's Tick (its default).
const slotTick = 10 * time.Millisecond

// bootSlots starts the incarnation's slots, if the world has concurrency
// rules.
func (n *node) bootSlots() {
	w := n.w
	n.slots = nil
	if !w.sc.hasSlots() {
		return
	}
	if n.gen > 1 {
		w.oracle.SlotsRestarted(w.now, n.i, !w.sc.NewIDs)
	}
	s := &slotSide{tables: map[string]*slots.Table{}, pending: map[*slots.Call]time.Duration{}}
	s.m = slots.NewManager(slots.Config{Stepped: true, Clock: slotClock{n}, Nodes: n.fleetSize, Logger: quiet,
		Unreachable: upstream.IsUnreachable, Timeout: n.callTimeout, Tick: slotTick})
	n.slots = s
	for _, r := range w.rules.Rules() {
		n.applySlots(r)
	}
	n.slotLoop(n.gen)
}

func (n *node) applySlots(r *rules.Rule) {
	if n.slots != nil && r.IsConcurrency() {
		n.slots.tables[r.Name] = n.slots.m.Table(r)
	}
}

// slotLoop turns the Manager every Tick while the incarnation lives (late,
// on a saturated node).
func (n *node) slotLoop(gen int) {
	if n.gen != gen || !n.alive {
		return
	}
	n.slotTurn()
	d := slotTick
	if n.late > 0 {
		d += time.Duration(n.w.rng.Int64N(int64(n.late)))
	}
	n.w.after(d, func() { n.slotLoop(gen) })
}

// slotTurn is one look of the Manager: its calls put on the network.
func (n *node) slotTurn() {
	calls, rets := n.slots.m.Turn()
	for _, r := range rets {
		n.slotRelease(r)
	}
	for _, c := range calls {
		n.slotSend(c)
	}
}

// slotSend carries one Acquire, as the client's slotTransport builds it.
func (n *node) slotSend(c *slots.Call) {
	w := n.w
	w.stats.Calls++
	gen, s := n.gen, n.slots
	s.pending[c] = w.now
	pr := &allotv1.AcquireRequest{NodeId: n.id, Requests: make([]*allotv1.LeaseRequest, len(c.Requests))}
	for i, r := range c.Requests {
		kept := r.Kept
		pr.Requests[i] = &allotv1.LeaseRequest{Rule: r.Rule, Key: r.Key, Want: r.Want, SlotsKept: &kept, Seq: uint64(r.Seq)}
	}
	w.net.send(n.i, func() {
		resp, err := w.alloc.acquire(pr)
		if err == nil {
			for i, l := range resp.GetLeases() {
				r := c.Requests[i]
				w.tracef("store: node %d %s/%s slots want %d kept %d: granted %d share %d", n.i, r.Rule, r.Key, r.Want, r.Kept, l.GetGranted(), l.GetSlotShare())
			}
		}
		w.net.send(n.i, func() { n.slotAnswer(gen, c, resp, err) })
	})
	w.after(n.callTimeout(), func() { n.slotAnswer(gen, c, nil, context.DeadlineExceeded) })
}

// slotAnswer brings one call's answer (or its failure) to the Manager.
func (n *node) slotAnswer(gen int, c *slots.Call, resp *allotv1.AcquireResponse, err error) {
	w := n.w
	if gen != n.gen || n.slots == nil {
		return
	}
	s := n.slots
	sent, ok := s.pending[c]
	if !ok {
		return // a duplicate, or a late answer after the timeout
	}
	delete(s.pending, c)
	var grants []slots.Grant
	if err == nil {
		for i, l := range resp.GetLeases() {
			g := slots.Grant{Granted: l.GetGranted(), Share: l.GetSlotShare(), TTL: l.GetTtl().AsDuration()}
			grants = append(grants, g)
			if i < len(c.Requests) {
				r := c.Requests[i]
				w.oracle.SlotGranted(w.now, sent, n.i, r.Rule, r.Key, g.Granted, g.TTL)
			}
		}
	} else {
		w.tracef("node %d: slot call of %d failed: %v", n.i, len(c.Requests), err)
	}
	s.m.Answer(c, grants, err)
	for _, r := range c.Requests {
		if t := s.tables[r.Rule]; t != nil {
			if k := t.Lookup(r.Key); k != nil {
				w.tracef("node %d: %s/%s slots cap %d in flight %d mode %d", n.i, r.Rule, r.Key, k.Cap(), k.InFlight(), k.Mode())
			}
		}
	}
	n.wakeSlotWaiters()
}

// slotRelease carries one Release; nothing comes back.
func (n *node) slotRelease(reqs []slots.Request) {
	w := n.w
	w.stats.Releases++
	pr := &allotv1.ReleaseRequest{NodeId: n.id, Returns: make([]*allotv1.Return, len(reqs))}
	for i, r := range reqs {
		pr.Returns[i] = &allotv1.Return{Rule: r.Rule, Key: r.Key}
	}
	w.net.send(n.i, func() { w.alloc.release(pr) })
}

// takeSlot is a caller's request on a concurrency rule: TakeSlot, then
// the handler's hold, then Release.
func (n *node) takeSlot(r *rules.Rule, key string) {
	s := n.slots
	t := s.tables[r.Name]
	if t == nil {
		return
	}
	old := t.Lookup(key)
	fresh := old == nil || old.Dead()
	k := t.Key(key)
	if fresh {
		n.slotTurn() // the loop's kick
	}
	if n.holdSlot(r.Name, key, k) {
		return
	}
	select {
	case <-k.First():
	default:
		n.w.stats.Waited++
		s.waiters = append(s.waiters, &slotWaiter{rule: r.Name, key: key, k: k,
			deadline: n.w.now + max(250*time.Millisecond, n.callTimeout())})
	}
}

// holdSlot takes a slot of k if one is free, and gives it back when the
// handler ends.
func (n *node) holdSlot(rule, key string, k *slots.Key) bool {
	w := n.w
	if !k.Take() {
		return false
	}
	mode := oracle.Lease
	if k.Mode() == slots.ModeFallback {
		mode = oracle.Fallback
		w.stats.Fallback++
	}
	w.stats.Admitted++
	w.oracle.Took(w.now, n.i, rule, key, mode)
	hold := w.sc.Load.holdMin
	if span := w.sc.Load.holdMax - hold; span > 0 {
		hold += time.Duration(w.rng.Int64N(int64(span)))
	}
	gen := n.gen
	w.after(hold, func() {
		if n.gen == gen { // (a crash ends its handlers)
			k.Give()
			w.oracle.Gave(w.now, n.i, rule, key, mode)
		}
	})
	return true
}

// wakeSlotWaiters takes again the slots waiting for a first lease.
func (n *node) wakeSlotWaiters() {
	s := n.slots
	ws := s.waiters
	s.waiters = nil
	for _, q := range ws {
		select {
		case <-q.k.First():
			n.holdSlot(q.rule, q.key, q.k)
			continue
		default:
		}
		if n.w.now < q.deadline {
			s.waiters = append(s.waiters, q)
		}
	}
}

// crashSlots ends the incarnation's handlers with it; the store keeps its
// slots until its leases end.
func (n *node) crashSlots() {
	if n.slots != nil {
		n.w.oracle.SlotsCrashed(n.w.now, n.i)
		n.slots = nil
	}
}

// closeSlots closes the Manager as the SDK's Close does: the slots of
// every key with none in flight given back.
func (n *node) closeSlots() {
	if n.slots == nil {
		return
	}
	n.slots.m.Close()
	for _, r := range n.slots.m.TakeReleases() {
		n.slotRelease(r)
	}
}

// hasSlots says whether the scenario has a concurrency rule.
func (s *Scenario) hasSlots() bool {
	for _, r := range s.Rules.Rules() {
		if r.IsConcurrency() {
			return true
		}
	}
	return false
}

// slotRule is a concurrency rule as the oracle reads it.
func slotRule(r *rules.Rule) oracle.SlotRule {
	return oracle.SlotRule{Name: r.Name, Limit: r.Limit, TTL: r.Lease.TTL, MaxHold: r.MaxHold, FailClosed: r.Failure == rules.FailClosed}
}
