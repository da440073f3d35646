package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Load is the requests a run's callers make: streams of requests, each on
// one node and one key, in a shape.
type Load struct {
	streams []*stream
	// holdMin and holdMax bound how long a caller holds a slot of a
	// concurrency rule (drawn evenly between).
	holdMin, holdMax time.Duration
}

// stream is one node's callers on one key: Poisson arrivals at rate
// requests per second, each of cost tokens, over [from, to), and, when
// period is set, only in the first duty of each period from phase.
type stream struct {
	node          int
	rule, key     string
	rate          float64
	cost          int64
	from, to      time.Duration
	period, phase time.Duration
	duty          float64
	burst         int         // a burst of this many requests at once, each arrival
	once          bool        // one arrival, at from
	paced         bool        // arrivals exactly 1/rate apart, not Poisson
	settle        *settleDraw // each admitted request settled after its work (settle.go)
}

func (l *Load) start(w *World) {
	for _, s := range l.streams {
		s.next(w, s.from)
	}
}

func (s *stream) next(w *World, from time.Duration) {
	if s.once {
		w.at(from, func() {
			for range max(s.burst, 1) {
				w.nodes[s.node].requestSettled(s.rule, s.key, s.cost, s.settle)
			}
		})
		return
	}
	gap := time.Duration(w.rng.ExpFloat64() / s.rate * float64(time.Second))
	if s.paced {
		gap = time.Duration(float64(time.Second) / s.rate)
	}
	at := from + gap
	if at >= s.to {
		return
	}
	w.at(at, func() {
		if s.on(w.now) {
			for range max(s.burst, 1) {
				w.nodes[s.node].requestSettled(s.rule, s.key, s.cost, s.settle)
			}
		}
		s.next(w, w.now)
	})
}

func (s *stream) on(t time.Duration) bool {
	if s.period <= 0 {
		return true
	}
	in := (t + s.phase) % s.period
	return float64(in) < s.duty*float64(s.period)
}

// drawLoad draws the load's shape and multiple.
func drawLoad(rng *rand.Rand, sc *Scenario) Load {
	var l Load
	mult := pick(rng, 0.5, 1, 2, 2, 10, 50)
	shape := pick(rng, "uniform", "uniform", "skew", "onoff", "quiet-window", "hot-key", "zipf", "bursts")
	sc.label(shape, "(x%g)", mult)
	for _, r := range sc.Rules.Rules() {
		if r.IsConcurrency() {
			continue // (slotLoad)
		}
		l.shape(rng, sc, r, shape, mult)
	}
	return l
}

// perNode splits a rule's offered tokens per second into streams of at
// most maxArrivals requests per second (costs above 1 carry the rest).
func (l *Load) add(sc *Scenario, r *rules.Rule, node int, key string, tokens float64, from, to time.Duration) *stream {
	const maxArrivals = 400
	cost := int64(math.Ceil(tokens / maxArrivals))
	cost = min(max(cost, 1), max(r.Capacity()/int64(max(sc.Nodes, 1)), 1))
	s := &stream{node: node, rule: r.Name, key: key, rate: tokens / float64(cost), cost: cost, from: from, to: to}
	if s.rate <= 0 {
		return s
	}
	l.streams = append(l.streams, s)
	return s
}

func (l *Load) shape(rng *rand.Rand, sc *Scenario, r *rules.Rule, shape string, mult float64) {
	rate := r.Rate() * mult
	n := sc.Nodes
	end := sc.Length
	switch shape {
	case "uniform":
		for i := range n {
			l.add(sc, r, i, "k", rate/float64(n), 0, end)
		}
	case "skew": // one node takes most
		for i := range n {
			share := 0.8
			if n > 1 {
				share = map[bool]float64{true: 0.8, false: 0.2 / float64(n-1)}[i == 0]
			} else {
				share = 1
			}
			l.add(sc, r, i, "k", rate*share, 0, end)
		}
	case "onoff": // each node on and off, in phases of its own
		for i := range n {
			s := l.add(sc, r, i, "k", 2*rate/float64(n), 0, end)
			s.period = time.Duration((0.5 + 2.5*rng.Float64()) * float64(time.Second))
			s.phase = time.Duration(rng.Int64N(int64(s.period)))
			s.duty = 0.5
		}
	case "quiet-window": // load only now and then: a window that follows a quiet one
		period := max(2*r.Period, 2*time.Second)
		for i := range n {
			s := l.add(sc, r, i, "k", 4*rate/float64(n), 0, end)
			s.period, s.duty = period, 0.25
		}
	case "hot-key": // a key new to every node, suddenly hot
		from := time.Duration((0.25 + 0.25*rng.Float64()) * float64(end))
		for i := range n {
			l.add(sc, r, i, "cold", 0.2*rate/float64(n), 0, end)
			l.add(sc, r, i, "hot", 10*r.Rate()/float64(n), from, end)
		}
	case "zipf": // a long tail of keys
		keys := pick(rng, 20, 100, 300)
		for k := 1; k <= keys; k++ {
			weight := 1 / math.Pow(float64(k), 1.1)
			for i := range n {
				l.add(sc, r, i, fmt.Sprintf("z%d", k), rate*weight/float64(n), 0, end)
			}
		}
	case "bursts": // bursts shorter than a round trip
		for i := range n {
			l.add(sc, r, i, "k", 0.3*rate/float64(n), 0, end)
			s := l.add(sc, r, i, "k", 0.5, 0, end) // one burst every two seconds
			s.burst = int(min(max(2*r.Capacity()/int64(n), 2), 200))
			s.cost = 1
		}
	}
}
