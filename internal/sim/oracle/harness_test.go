package oracle

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The table tests feed small histories of one rule "r" and key "k" and
// compare the violations with the exact ones wanted.

// ev is one event of a history.
type ev func(o *Oracle)

func setRule(at time.Duration, r Rule) ev {
	return func(o *Oracle) { r.Name = "r"; o.SetRule(at, r) }
}

// spread sets r at at as a reload that reaches the nodes one at a time
// (until learned).
func spread(at time.Duration, r Rule) ev {
	return func(o *Oracle) { setRule(at, r)(o); o.Spreading("r") }
}

// learned says every node has the newest version of "r" from at.
func learned(at time.Duration) ev {
	return func(o *Oracle) { o.Learned(at, "r", len(o.rules["r"].vers)-1) }
}

func admS(at, storeAt time.Duration, node int, cost int64, m Mode) ev {
	return func(o *Oracle) { o.Admitted(at, storeAt, node, "r", "k", cost, m) }
}

// many admits n requests of cost 1 at at.
func many(at time.Duration, node int, n int, m Mode) ev {
	return func(o *Oracle) {
		for range n {
			o.Admitted(at, at, node, "r", "k", 1, m)
		}
	}
}

func offer(at time.Duration, n int) ev {
	return func(o *Oracle) {
		for range n {
			o.Offered(at, 0, "r", "k", 1)
		}
	}
}

func grant(at, sent time.Duration, node int, tokens int64, rate float64, ttl time.Duration) ev {
	return func(o *Oracle) { o.Granted(at, sent, node, "r", "k", tokens, rate, ttl) }
}

func ret(at time.Duration, node int, tokens int64) ev {
	return func(o *Oracle) { o.Returned(at, node, "r", "k", tokens) }
}

func rel(at time.Duration, node int) ev {
	return func(o *Oracle) { o.Released(at, node, "r", "k") }
}

func faulty(from, to time.Duration) ev {
	return func(o *Oracle) { o.Fault(from, to, "test fault") }
}

// want is a violation as a test states it.
type want struct {
	inv      Invariant
	node     int
	from, to time.Duration
	store    bool
	measured float64
	bound    float64
}

func (w want) String() string {
	return fmt.Sprintf("%s node %d [%v, %v] store=%v %g > %g", w.inv, w.node, w.from, w.to, w.store, w.measured, w.bound)
}

type tcase struct {
	name        string
	nodes       int
	callTimeout time.Duration
	evs         []ev
	want        []want
}

func run(nodes int, evs []ev) *Oracle { return runConfig(Config{Nodes: nodes}, evs) }

func runConfig(cfg Config, evs []ev) *Oracle {
	o := New(cfg)
	for _, e := range evs {
		e(o)
	}
	return o
}

func runCases(t *testing.T, cases []tcase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := runConfig(Config{Nodes: max(c.nodes, 1), CallTimeout: c.callTimeout}, c.evs)
			check(t, o.Violations(), c.want)
		})
	}
}

func check(t *testing.T, got []Violation, wants []want) {
	t.Helper()
	match := len(got) == len(wants)
	for i := 0; match && i < len(got); i++ {
		g, w := got[i], wants[i]
		match = g.Invariant == w.inv && g.Node == w.node && g.From == w.from && g.To == w.to &&
			g.StoreTime == w.store && near(g.Measured, w.measured) && near(g.Bound, w.bound)
	}
	if match {
		return
	}
	var b strings.Builder
	for _, g := range got {
		b.WriteString("\n  " + g.String())
	}
	t.Errorf("violations:%s\nwant %v", b.String(), wants)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }
