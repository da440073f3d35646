package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Faults is what goes wrong in a run, each at its instant.
type Faults struct {
	list []fault
}

type fault struct {
	at    time.Duration
	what  string
	apply func(w *World)
}

func (f *Faults) start(w *World) {
	if w.sc.Link.Loss > 0 || w.sc.Link.Dup > 0 || w.sc.Link.HeavyTail {
		w.oracle.Fault(0, w.sc.Length, "a lossy network")
	}
	for _, x := range f.list {
		x := x
		w.at(x.at, func() {
			w.tracef("fault: %s", x.what)
			x.apply(w)
		})
	}
}

func (f *Faults) add(sc *Scenario, at time.Duration, kind, what string, apply func(w *World)) {
	f.list = append(f.list, fault{at: at, what: kind + what, apply: apply})
	sc.label(kind, "%s@%v", what, at.Round(time.Millisecond))
}

// drawFaults draws none (a calm run) or a few faults of every kind.
func drawFaults(rng *rand.Rand, sc *Scenario) Faults {
	var f Faults
	if rng.IntN(8) == 0 {
		sc.Link.Loss = pick(rng, 0.01, 0.05)
		sc.Link.Dup = pick(rng, 0, 0.02)
		sc.Link.HeavyTail = rng.IntN(2) == 0
		sc.label("lossy", "(%.2f dup %.2f tail %v)", sc.Link.Loss, sc.Link.Dup, sc.Link.HeavyTail)
	}
	if rng.IntN(6) == 0 {
		sat := 1 + rng.IntN(sc.Nodes)
		late := pick(rng, 5*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond)
		f.add(sc, 0, "saturated", fmt.Sprintf("(%d nodes, %v late)", sat, late), func(w *World) {
			for i := range sat {
				w.nodes[i].late = late
			}
		})
	}
	if rng.IntN(2) == 0 {
		return f // calm (or only lossy, or saturated)
	}
	for range 1 + rng.IntN(3) {
		at := time.Duration(rng.Float64() * 0.7 * float64(sc.Length))
		length := time.Duration((0.05 + rng.Float64()*0.6) * float64(sc.Length))
		switch rng.IntN(9) {
		case 0, 1:
			node := rng.IntN(sc.Nodes)
			f.add(sc, at, "cut", fmt.Sprintf("(node %d, %v)", node, length.Round(time.Millisecond)), func(w *World) {
				w.cut([]int{node}, length)
			})
		case 2:
			var group []int
			for i := range sc.Nodes {
				if rng.IntN(2) == 0 {
					group = append(group, i)
				}
			}
			f.add(sc, at, "cut-group", fmt.Sprintf("(%v, %v)", group, length.Round(time.Millisecond)), func(w *World) { w.cut(group, length) })
		case 3:
			f.add(sc, at, "store-cut", fmt.Sprintf("(%v)", length.Round(time.Millisecond)), func(w *World) {
				w.alloc.storm = append(w.alloc.storm, span{w.now, w.now + length})
				w.oracle.Fault(w.now, w.now+length, "allocator cut off from its store")
			})
		case 4:
			down := time.Duration(rng.Float64() * float64(2*time.Second))
			f.add(sc, at, "allocator-restart", fmt.Sprintf("(%v)", down.Round(time.Millisecond)), func(w *World) {
				w.alloc.down = append(w.alloc.down, span{w.now, w.now + down})
				w.alloc.restart()
				w.oracle.Fault(w.now, w.now+down, "allocator restart")
			})
		case 5:
			node := rng.IntN(sc.Nodes)
			down := time.Duration(rng.Float64() * float64(3*time.Second))
			f.add(sc, at, "crash", fmt.Sprintf("(node %d, %v)", node, down.Round(time.Millisecond)), func(w *World) {
				n := w.nodes[node]
				if !n.alive {
					return
				}
				n.crash()
				w.oracle.Fault(w.now, w.now+down, "node crash")
				w.after(down, n.boot)
			})
		case 6:
			node := rng.IntN(sc.Nodes)
			step := time.Duration((rng.Float64()*2 - 1) * float64(time.Hour))
			f.add(sc, at, "node-clock-step", fmt.Sprintf("(node %d, %v)", node, step.Round(time.Second)), func(w *World) {
				w.nodes[node].clk.skew += step
				w.oracle.Fault(w.now, w.now+time.Millisecond, "node clock step")
			})
		case 7:
			step := time.Duration((rng.Float64()*2 - 1) * float64(3*time.Second))
			f.add(sc, at, "store-clock-step", fmt.Sprintf("(%v)", step.Round(time.Millisecond)), func(w *World) {
				before := w.store.at(w.now)
				w.store.offset += step
				w.oracle.StoreClockStep(w.now, before, w.store.at(w.now))
				w.oracle.Fault(w.now, w.now+time.Millisecond, "store clock step")
			})
		case 8:
			scale := pick(rng, 0.5, 2.0)
			f.add(sc, at, "reload", fmt.Sprintf("(x%g)", scale), func(w *World) { w.reload(scale) })
		}
	}
	return f
}

// cut cuts nodes off from the allocator for length.
func (w *World) cut(nodes []int, length time.Duration) {
	for _, i := range nodes {
		w.net.cuts[i] = append(w.net.cuts[i], span{w.now, w.now + length})
		w.oracle.Cut(i, w.now, w.now+length)
	}
	w.oracle.Fault(w.now, w.now+length, fmt.Sprintf("partition of %v", nodes))
}

// reload scales every rule's limit: the allocator takes the new rules at
// once, each node when it next fetches them (within two seconds). A fetch
// gets the allocator's rules of the time, as the SDK's (serial) fetch
// does: a node whose delivery of an earlier reload comes after a later
// one's keeps the later rules, never the set of the reload that sent it
// (seed 53808: node 4 took 25/s at 2.70 s, then 50/s at 2.93 s, and fell
// back on it while the oracle was told every node had 25/s).
func (w *World) reload(scale float64) {
	var list []rules.Rule
	for _, r := range w.rules.Rules() {
		c := *r
		c.Limit = max(int64(float64(c.Limit)*scale), 1)
		if c.Algorithm == rules.TokenBucket {
			c.Burst = max(int64(float64(c.Burst)*scale), 1)
		} else {
			c.Burst = 0
		}
		c.Lease.Min, c.Lease.Max, c.Lease.Refresh = 0, 0, 0
		if err := c.Normalize(); err != nil {
			panic(fmt.Sprintf("sim: reload: %v", err))
		}
		list = append(list, c)
	}
	set, err := rules.NewSet(list)
	if err != nil {
		panic(fmt.Sprintf("sim: reload: %v", err))
	}
	w.rules = set
	w.alloc.setRules(set)
	vers := map[string]int{}
	for _, r := range set.Rules() {
		if r.IsConcurrency() {
			w.oracle.SetSlotRule(w.now, slotRule(r))
			vers[r.Name] = 0
			continue
		}
		w.oracle.SetRule(w.now, w.oracleRule(r))
		vers[r.Name] = w.oracle.Spreading(r.Name)
	}
	// Until the last node has the new rules, the others' decisions may
	// still be the old ones': the oracle holds windows to both.
	left := len(w.nodes)
	for _, n := range w.nodes {
		n := n
		gen := n.gen
		w.after(time.Duration(w.rng.Int64N(int64(2*time.Second))), func() {
			if n.gen == gen && n.alive {
				for _, r := range w.rules.Rules() {
					n.apply(r)
				}
			}
			if left--; left == 0 {
				for name, v := range vers {
					w.oracle.Learned(w.now, name, v)
				}
			}
		})
	}
}
