package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Scenario is what a run plays: the fleet, its rules, its network, its
// load and its faults. NewScenario draws one from a seed.
type Scenario struct {
	Nodes int
	Rules *rules.Set
	Link  Link
	// Drift makes the nodes' monotonic clocks run off true time by up to
	// this (parts per second). Drawn scenarios leave it at 0: a clock
	// running fast by d lets shares earn d more (a few tokens an hour at
	// 1e-4), which is not what the bounds are about.
	Drift  float64
	Skew   time.Duration // their wall clocks are off by up to this
	Length time.Duration
	// What the nodes know of the fleet's size: gossip counts the live
	// nodes; Configured sets Config.Nodes to the fleet's size; neither is
	// a cold fleet of nodes configured with the allocators and an id only.
	Gossip, Configured bool
	// RulesLate: the nodes start on rules of their own (Config.Rules), their
	// first GetRules unanswered, so the allocator counts a node only once
	// its first Acquire arrives, and a node knows no fleet size but what
	// its leases tell it: a cold fleet at its harshest. Otherwise a node
	// fetches the rules as it starts, as the SDK does, and learns the
	// allocator's count of the nodes started before it.
	RulesLate     bool
	NewIDs        bool // a node that restarts takes a new id
	TokensOnly    bool
	Settles       bool // requests settled after their work (scenario_settle.go)
	Load          Load
	Faults        Faults
	labels, kinds []string
}

// Link is the network between each node and the allocator, one way.
type Link struct {
	OneWay, Jitter time.Duration
	Loss, Dup      float64
	HeavyTail      bool
}

func (s *Scenario) label(kind, format string, args ...any) {
	s.labels = append(s.labels, kind+fmt.Sprintf(format, args...))
	s.kinds = append(s.kinds, kind)
}

// callTimeout is every node's RPCTimeout, as the docs ask of a far
// allocator: above its round trip.
func (s *Scenario) callTimeout() time.Duration {
	l := s.Link
	return max(250*time.Millisecond, 4*(l.OneWay+l.Jitter)+250*time.Millisecond)
}

// givenNodes is the fleet size the world gives every node to divide its
// fallback by, the N the oracle holds a node's unreserved fallback to:
// Config.Nodes, or the gossip count while no partition takes a node out of
// the pool. Otherwise a node divides by what the allocator told it, and by
// 1 before it has heard from it (docs/bounds.md, rule 5 and "N wrong").
func (s *Scenario) givenNodes() int {
	if s.Configured || s.Gossip && !slices.Contains(s.kinds, "cut") && !slices.Contains(s.kinds, "cut-group") {
		return s.Nodes
	}
	return 1
}

// String names what the scenario exercises.
func (s *Scenario) String() string { return strings.Join(s.labels, " ") }

// Kinds are the kinds of what the scenario exercises, for the coverage
// counts.
func (s *Scenario) Kinds() []string { return s.kinds }

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// NewScenario draws a scenario from seed.
func NewScenario(seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &Scenario{}
	s.Nodes = pick(rng, 1, 2, 3, 5, 8, 8, 8, 10)
	s.Link = Link{OneWay: pick(rng, 0, 500*time.Microsecond, 5*time.Millisecond, 25*time.Millisecond, 100*time.Millisecond, 500*time.Millisecond)}
	s.Link.Jitter = time.Duration(rng.Float64() * float64(s.Link.OneWay) / 2)
	s.Length = time.Duration(pick(rng, 8, 12, 20)) * time.Second
	if s.Link.OneWay >= 500*time.Millisecond {
		s.Length = 30 * time.Second
	}
	s.Skew = pick(rng, 0, time.Second, time.Minute)
	switch rng.IntN(3) {
	case 0:
		s.Gossip = true
	case 1:
		s.Configured = true
	}
	s.NewIDs = rng.IntN(2) == 0
	s.TokensOnly = rng.IntN(8) == 0
	s.Rules = drawRules(rng, s)
	s.label("nodes", "=%d", s.Nodes)
	s.label("rtt", "=%v", 2*s.Link.OneWay)
	if s.Link.OneWay >= 500*time.Millisecond {
		s.label("far", "")
	}
	switch {
	case s.Gossip:
		s.label("gossip", "")
	case s.Configured:
		s.label("configured", "")
	default:
		s.label("cold", "")
	}
	if s.TokensOnly {
		s.label("tokens-only", "")
	}
	s.Load = drawLoad(rng, s)
	s.Faults = drawFaults(rng, s)
	drawSlots(seed, s)
	drawSettle(seed, s)
	// (Drawn apart, as slots and settling are, to leave the other draws of
	// a seed as they were.)
	if rand.New(rand.NewPCG(seed, rulesLateSalt)).IntN(2) == 0 {
		s.RulesLate = true
		s.label("rules-late", "")
	}
	return s
}

const rulesLateSalt = 0x1a7e

// drawRules draws one or two rules, every algorithm and failure mode.
func drawRules(rng *rand.Rand, s *Scenario) *rules.Set {
	n := 1 + rng.IntN(2)
	var list []rules.Rule
	for i := range n {
		r := rules.Rule{Name: fmt.Sprintf("r%d", i), Failure: rules.FailOpen}
		rate := pick(rng, 5.0, 20, 100, 1000, 5000)
		r.Period = pick(rng, time.Second, time.Second, 10*time.Second, time.Minute)
		r.Limit = max(int64(rate*r.Period.Seconds()), 1)
		switch rng.IntN(20) {
		case 0, 1, 2, 3:
			r.Algorithm = rules.FixedWindow
		case 4, 5, 6:
			r.Algorithm = rules.SlidingWindow
		case 7:
			r.Algorithm = rules.SlidingLog
			r.Limit = min(r.Limit, 500)
		default:
			r.Algorithm = rules.TokenBucket
			r.Burst = max(int64(float64(r.Limit)*pick(rng, 0.01, 0.1, 0.25, 1.0)), 1)
		}
		if rng.IntN(8) == 0 {
			r.Failure = rules.FailClosed
		}
		if r.Algorithm == rules.TokenBucket && rng.IntN(12) == 0 {
			r.Strict = true
		}
		ttl := pick(rng, time.Second, 2*time.Second, 4*time.Second)
		if rtt := 2 * (s.Link.OneWay + s.Link.Jitter); ttl < 4*rtt {
			if rng.IntN(3) != 0 {
				ttl = 4 * rtt // the TTL the node suggests
			} else {
				s.label("short-ttl", "") // bounds only: a short TTL costs accuracy
			}
		}
		r.Lease.TTL = ttl
		if r.Algorithm != rules.TokenBucket && r.Algorithm != rules.SlidingLog && r.Period < 4*2*(s.Link.OneWay+s.Link.Jitter) {
			s.label("short-window", "") // a lease lives less than a round trip: bounds only
		}
		if err := r.Normalize(); err != nil {
			panic(fmt.Sprintf("sim: rule %+v: %v", r, err))
		}
		kind := r.Algorithm.String()
		if r.Strict {
			kind += "-strict"
		}
		if r.Failure == rules.FailClosed {
			kind += "-closed"
		}
		s.label(kind, "(%s: %d/%v burst %d ttl %v)", r.Name, r.Limit, r.Period, r.Burst, r.Lease.TTL)
		list = append(list, r)
	}
	set, err := rules.NewSet(list)
	if err != nil {
		panic(fmt.Sprintf("sim: rules: %v", err))
	}
	return set
}
