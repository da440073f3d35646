package sim

import "time"

// network carries messages between the nodes and the allocator: each way
// a delay with jitter (and, when heavy, a tail), loss, duplication; the
// jitter reorders. A node cut off from the allocator sends and receives
// nothing; what is in flight when a cut begins is lost at delivery.
type network struct {
	w    *World
	cuts map[int][]span // by node: when it is cut off
}

type span struct{ from, to time.Duration }

func newNetwork(w *World) *network { return &network{w: w, cuts: map[int][]span{}} }

// cut reports whether node is cut off at t.
func (n *network) cut(node int, t time.Duration) bool {
	for _, s := range n.cuts[node] {
		if t >= s.from && t < s.to {
			return true
		}
	}
	return false
}

// delay draws one way's delay for node.
func (n *network) delay(node int) time.Duration {
	l := n.w.sc.Link
	d := l.OneWay
	if l.Jitter > 0 {
		d += time.Duration(n.w.rng.Float64() * float64(l.Jitter))
	}
	if l.HeavyTail && n.w.rng.Float64() < 0.02 { // one in fifty waits ten times longer
		d += time.Duration(9 * float64(l.OneWay+l.Jitter))
	}
	return d
}

// send delivers fn (the message's arrival) from or to node, unless it is
// lost or the node is cut off at either end; it may arrive twice.
func (n *network) send(node int, fn func()) {
	w := n.w
	if n.cut(node, w.now) {
		w.stats.Lost++
		return
	}
	l := w.sc.Link
	if l.Loss > 0 && w.rng.Float64() < l.Loss {
		w.stats.Lost++
		return
	}
	copies := 1
	if l.Dup > 0 && w.rng.Float64() < l.Dup {
		copies = 2
		w.stats.Duplicated++
	}
	for range copies {
		at := w.now + n.delay(node)
		w.at(at, func() {
			if n.cut(node, w.now) {
				w.stats.Lost++
				return
			}
			fn()
		})
	}
}
