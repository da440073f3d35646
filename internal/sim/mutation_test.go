package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/mutate"
	"github.com/allot-dev/allot/internal/sim/oracle"
)

// The simulator's teeth: each of the faults the lease and the store once
// had, put back on purpose (internal/mutate), must be found in a run that
// passes without it: a bound broken, or an accuracy lost. The runs are the
// faults' own shapes, as the issue that found them measured them.

const (
	bucket1000 = "  - {name: r, algorithm: token_bucket, limit: 1000, period: 1s, burst: 100, lease: {ttl: 2s}}\n"
	bucket20   = "  - {name: r, algorithm: token_bucket, limit: 20, period: 1s, burst: 5, lease: {ttl: 2s}}\n"
	hourly100  = "  - {name: r, algorithm: token_bucket, limit: 100, period: 1h, burst: 100}\n"
	api200     = "  - {name: r, algorithm: token_bucket, limit: 1000, period: 1m, burst: 200}\n"
	window1000 = "  - {name: r, algorithm: fixed_window, limit: 1000, period: 1s, lease: {ttl: 2s}}\n"
)

// mutant is one fault and the run that must find it.
type mutant struct {
	name string
	m    mutate.Mutation
	run  func(t *testing.T) Result
	// found says whether the mutated run shows the fault, given the run
	// without it.
	found func(clean, mutated Result) (bool, string)
}

// broke finds a run that broke inv (any invariant when inv is "").
func broke(inv string) func(clean, mutated Result) (bool, string) {
	return func(clean, mutated Result) (bool, string) {
		n := 0
		for _, v := range mutated.Violations {
			if inv == "" || string(v.Invariant) == inv {
				n++
			}
		}
		first := ""
		if len(mutated.Violations) > 0 {
			first = mutated.Violations[0].String()
		}
		return n > 0, fmt.Sprintf("%d %q violations (without it: %d violations, ratio %.3f); first: %s",
			n, inv, len(clean.Violations), clean.Report.Ratio, first)
	}
}

// lost finds a run whose accuracy fell by at least drop.
func lost(drop float64) func(clean, mutated Result) (bool, string) {
	return func(clean, mutated Result) (bool, string) {
		return clean.Report.Ratio-mutated.Report.Ratio >= drop,
			fmt.Sprintf("admitted/ideal %.3f with it, %.3f without", mutated.Report.Ratio, clean.Report.Ratio)
	}
}

var mutants = []mutant{
	{"1: a fixed window served a delay short of the store's window, its fallback a bucket", mutate.FallbackWhileServed | mutate.WindowAsBucket,
		func(t *testing.T) Result {
			sc := fleetScenario(t, window1000, 100*time.Millisecond, 2, 12*time.Second)
			quietWindows(sc)
			return RunScenario(1, sc)
		}, broke("window")},
	{"2: a node gives back what it spent, and the store credits what it lent", mutate.ReturnGrant | mutate.CreditLent,
		func(t *testing.T) Result {
			return RunScenario(1, fleetScenario(t, bucket1000, 10*time.Millisecond, 2, 6*time.Second))
		}, broke("bucket")},
	{"2: (the node alone, the store's account holding)", mutate.ReturnGrant,
		func(t *testing.T) Result {
			return RunScenario(1, fleetScenario(t, bucket1000, 10*time.Millisecond, 2, 6*time.Second))
		}, broke("returns")},
	{"3: a long cut forgiven, nothing reserved", mutate.ForgiveLate,
		func(t *testing.T) Result {
			sc := fleetScenario(t, bucket1000, 10*time.Millisecond, 2, 30*time.Second)
			sc.Faults.add(sc, 4*time.Second, "cut", "(node 0, 20s)", func(w *World) { w.cut([]int{0}, 20*time.Second) })
			return RunScenario(1, sc)
		}, broke("bucket")},
	{"4: a cold fleet falls back while its first leases are on their way", mutate.FallbackInFlight,
		func(t *testing.T) Result {
			sc := fleetScenario(t, bucket1000, 200*time.Millisecond, 50, 6*time.Second)
			sc.RulesLate = true // (nodes that count 1 to 8 spend 2.7 bursts on fallbacks, not 8)
			return RunScenario(1, sc)
		}, broke("")},
	{"4b: 1,000 at once on a fresh key of 100 an hour, from 8 cold nodes", mutate.FallbackInFlight,
		func(t *testing.T) Result { return RunScenario(1, stampede(t)) }, broke("")},
	{"5: a fixed window's fallback is a token bucket", mutate.WindowAsBucket,
		func(t *testing.T) Result {
			// A key new to the nodes while the allocator is cut off from its
			// store: a fresh allowance, limit/N of a bucket, full.
			sc := fleetScenario(t, window1000, 10*time.Millisecond, 2, 12*time.Second)
			sc.Configured = true
			for _, s := range sc.Load.streams {
				s.key, s.from = "new", 3*time.Second
			}
			sc.Faults.add(sc, 2500*time.Millisecond, "store-cut", "(6s)", func(w *World) {
				w.alloc.storm = append(w.alloc.storm, span{w.now, w.now + 6*time.Second})
				w.oracle.Fault(w.now, w.now+6*time.Second, "allocator cut off from its store")
			})
			return RunScenario(1, sc)
		}, broke("")},
	{"6: a new lease's tokens die at an older lease's end", mutate.CarryEarliest,
		func(t *testing.T) Result {
			// (At its load's level tokens sit in the key between renewals;
			// 100 ms away it costs 0.04-0.05 of the ideal, 200 ms away 0.025.)
			return RunScenario(1, fleetScenario(t, bucket1000, 100*time.Millisecond, 1, 20*time.Second))
		}, lost(0.03)},
	{"7: a fresh key's leases sized by its short history", mutate.SizeByHistory,
		// (0.985 against 0.965: since a key whose share is a trickle asks
		// ahead when it runs low, leases that do not double cost it a few
		// refusals more at each, not the 0.7 of its first 200 they once did.)
		func(t *testing.T) Result { return RunScenario(1, oneFreshKey(t)) }, lost(0.015)},
	{"a shrinking share owes its whole flight", mutate.OweWholeOverlap,
		func(t *testing.T) Result {
			// (A first holder lent the whole rate: the nodes' first asks not
			// divided by the allocator's count of them.)
			sc := fleetScenario(t, strings.Replace(bucket1000, "2s", "4s", 1), time.Second, 2, 15*time.Second)
			sc.RulesLate = true
			return RunScenario(1, sc)
		}, lost(0.02)},
	{"a cold fleet's holders each told the holders they found: the first keeps the whole rule", mutate.TellHolders,
		func(t *testing.T) Result {
			// (The seed that found it, 482: a sliding window of 1,000 over 8
			// cold nodes 200 ms away, the allocator restarted before the
			// first holder asked again; 1,041 admitted on fallbacks in one
			// window.) Here: a cold fleet's holders of a fixed window, each
			// told by its first grant what to divide its fallback by, all on
			// their fallbacks for three windows before any asks again: the
			// allocator cut off from its store just after.
			sc := fleetScenario(t, window1000, 10*time.Millisecond, 2, 8*time.Second)
			sc.RulesLate = true
			sc.Faults.add(sc, 30*time.Millisecond, "store-cut", "(3s)", func(w *World) {
				w.alloc.storm = append(w.alloc.storm, span{w.now, w.now + 3*time.Second})
				w.oracle.Fault(w.now, w.now+3*time.Second, "allocator cut off from its store")
			})
			return RunScenario(1, sc)
		}, broke("window")},
	{"a token bucket refilled past what its holders still hold", mutate.RefillPastHeld,
		func(t *testing.T) Result {
			// The seed that found it, 2519: 100/s burst 25 over 2 saturated
			// nodes; the bucket refilled while a node kept its grant, and a
			// second admitted 140 where b + 1.1·r + 2·n is 139. (Seeds move
			// as the lease's timing does: 14242 found it while renewals
			// were drawn over 1-1.2 refresh; 2519, 8025 and 14253 among
			// others with them drawn within a refresh.)
			return Run(2519)
		}, broke("bucket-1s")},
	{"a node takes slots until its lease ends, ignoring max_hold", mutate.SlotsPastMaxHold,
		func(t *testing.T) Result {
			// Two nodes holding 10 of 20 each, one cut off for 3 s: its
			// last slots, taken up to its lease's end, run past the
			// store's count of them while the other is lent them again.
			// (failure: closed, so that no fallback's allowance hides
			// them.)
			closed := strings.Replace(slots20, "limit: 20,", "limit: 20, failure: closed,", 1)
			sc := slotFleet(t, closed, 2, 2*time.Millisecond, 10, 8*time.Second)
			sc.Faults.add(sc, 3*time.Second, "cut", "(node 0, 3s)", func(w *World) { w.cut([]int{0}, 3*time.Second) })
			return RunScenario(1, sc)
		}, broke("slots")},
	{"the store forgives every settled cost reported to it", mutate.IgnoreSettled,
		func(t *testing.T) Result {
			// (The seed that found it, 173: a token bucket of 20/s burst 5
			// over 8 nodes 10 ms away, one hot key, settled at 1-5 times
			// the estimate with a max_debt of 116: 219 admitted and
			// settled in 3.8 s where b + r·(T + L) + D is 217.3.)
			return Run(173)
		}, broke("bucket")},
	{"(the fleet's run, with a max_debt its callers do not pass)", mutate.IgnoreSettled,
		func(t *testing.T) Result {
			// TestSettledCostsInTheWorld's run at 200 ms, whose callers owe
			// at most 8,271 at once, with a D of 16,000, not the loose one
			// drawn: the oracle says if they owed more.
			return RunScenario(1, settledFleetDebt(t, 200*time.Millisecond, 16000))
		}, broke("bucket")},
}

// quietWindows makes the load come in bursts, each window after a quiet
// one.
func quietWindows(sc *Scenario) {
	for _, s := range sc.Load.streams {
		s.period, s.duty, s.rate = 2*time.Second, 0.5, 2*s.rate
	}
}

// stampede is the classic concurrency test: 1,000 requests at once on a
// fresh key of 100 an hour, from 8 nodes that know nothing of the fleet.
func stampede(t *testing.T) *Scenario {
	sc := fleetScenario(t, hourly100, 2*time.Millisecond, 0, 3*time.Second)
	sc.Load.streams = nil
	for i := range sc.Nodes {
		s := sc.Load.add(sc, sc.Rules.Rules()[0], i, "fresh", 1, 100*time.Millisecond, 3*time.Second)
		s.burst, s.cost, s.once = 125, 1, true
	}
	return sc
}

// oneFreshKey is one node and a fresh key of burst 200, asked 1 ms apart
// for 200 ms.
func oneFreshKey(t *testing.T) *Scenario {
	sc := fleetScenario(t, api200, time.Millisecond, 1, 200*time.Millisecond)
	sc.Nodes = 1
	sc.Load.streams = nil
	sc.Load.streams = []*stream{{node: 0, rule: "r", key: "fresh", rate: 1000, cost: 1, to: 200 * time.Millisecond, paced: true}}
	return sc
}

func TestMutations(t *testing.T) {
	for _, mu := range mutants {
		t.Run(mu.name, func(t *testing.T) {
			clean := mu.run(t)
			if clean.Failed() && len(clean.Violations) > 0 {
				t.Fatalf("fails without the mutation:\n%s", clean)
			}
			undo := mutate.Set(mu.m)
			mutated := mu.run(t)
			undo()
			ok, how := mu.found(clean, mutated)
			t.Logf("%s", how)
			if !ok {
				t.Errorf("the simulator did not find it: %s", how)
			}
		})
	}
}

var _ = oracle.Lease
