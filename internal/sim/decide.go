package sim

import (
	"time"

	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/sim/oracle"
)

// A caller's requests on a node, decided as the SDK decides them.

// requestSettled is a caller's request on the node, settled after its
// work by d (settle.go) when set.
func (n *node) requestSettled(rule, key string, cost int64, d *settleDraw) {
	w := n.w
	if !n.alive {
		return
	}
	if r, _ := w.rules.Get(rule); r.IsConcurrency() {
		w.stats.Decisions++
		n.takeSlot(r, key)
		return
	}
	w.oracle.Offered(w.now, n.i, rule, key, cost)
	w.stats.Decisions++
	r, _ := w.rules.Get(rule)
	if !r.Leasable() {
		n.strict(r, key, cost, d)
		return
	}
	n.decide(&waiter{rule: rule, key: key, cost: cost, settle: d}, lease.FirstAttempt)
}

// decide decides a request as the SDK does (client.take): the key's lease,
// else its fallback; a key with no lease yet waits for its first.
func (n *node) decide(q *waiter, attempt lease.Attempt) {
	w := n.w
	t := n.tables[q.rule]
	for range 3 {
		k := t.Key(q.key)
		if k == nil {
			return // (a full key table: not in these runs)
		}
		v := k.Decide(q.cost, n.mono(), n.clk.wall(w.now), n.nodesFor(k.Holders()), attempt)
		switch {
		case v.Gone:
			continue
		case v.Wait:
			if attempt == lease.FirstAttempt {
				w.stats.Waited++
				// The SDK's wait: FirstLeaseWait, or the call's own timeout.
				q.deadline = w.now + max(250*time.Millisecond, n.callTimeout(), 3*n.rtt)
				n.waiters = append(n.waiters, q)
				gen := n.gen
				w.at(q.deadline, func() {
					if n.gen == gen && !q.done {
						q.done = true // refused: no lease came in time
					}
				})
			}
		case v.Allowed:
			q.done = true
			mode := oracle.Lease
			if v.Fallback {
				mode = oracle.Fallback
				w.stats.Fallback++
			}
			n.admitted(q.rule, q.key, q.cost, mode, w.store.at(w.now))
			n.settleLater(q.settle, settlement{rule: q.rule, key: q.key, est: q.cost, k: k, v: v, mode: mode})
		default:
			q.done = true
		}
		break
	}
	n.turn()
}

// wakeWaiters decides again the requests waiting for a first lease.
func (n *node) wakeWaiters() {
	ws := n.waiters
	n.waiters = nil
	for _, q := range ws {
		if q.done {
			continue
		}
		n.decide(q, lease.AfterWait)
		if !q.done {
			n.waiters = append(n.waiters, q)
		}
	}
}

func (n *node) admitted(rule, key string, cost int64, mode oracle.Mode, storeAt time.Duration) {
	w := n.w
	w.stats.Admitted++
	w.oracle.Admitted(w.now, storeAt, n.i, rule, key, cost, mode)
}
