package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sim/oracle"
)

// World is one simulated run.
type World struct {
	sc     *Scenario
	rng    *rand.Rand
	now    time.Duration // true time since the run began
	events eventQueue
	seq    uint64

	store  *storeClock
	alloc  *allocator
	net    *network
	nodes  []*node
	rules  *rules.Set
	oracle *oracle.Oracle
	trace  *trace
	stats  Stats
}

// Stats counts what a run exercised.
type Stats struct {
	Decisions, Admitted, Fallback, Waited, Calls, Lost, Duplicated, Releases int
	// Settled counts the requests settled after their work (settle.go);
	// SettledExtra every token their work cost above its estimate, and
	// SettledDropped those of them the nodes left uncounted (past their
	// max_debt).
	Settled                      int
	SettledExtra, SettledDropped int64
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// eventQueue is a binary heap of events, earliest first (ties in the
// order they were scheduled): written out for the one type, since
// container/heap boxes every event it is given, and the world schedules
// millions.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }

func (q eventQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	h := *q
	e := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return e
}

// at schedules fn at true time t (not before now).
func (w *World) at(t time.Duration, fn func()) {
	w.seq++
	w.events.push(event{at: max(t, w.now), seq: w.seq, fn: fn})
}

// after schedules fn d from now.
func (w *World) after(d time.Duration, fn func()) { w.at(w.now+d, fn) }

// Result is what a run found.
type Result struct {
	Seed       uint64
	Scenario   string
	Kinds      []string
	Report     oracle.Report
	Violations []oracle.Violation
	Stats      Stats
	Trace      string // the last events of the run, when it failed
}

// Failed reports whether the run broke a bound (or, calm, missed the
// accuracy it must reach).
func (r Result) Failed() bool { return len(r.Violations) > 0 || r.accuracyMissed() }

func (r Result) accuracyMissed() bool {
	return r.isJudged() && r.Report.Ratio < r.accuracyTarget()
}

// isJudged says whether the run's accuracy is a verdict: a calm run, with
// an ideal large enough to say something, in a judged setting.
func (r Result) isJudged() bool {
	return r.Report.Calm && r.Report.Ideal >= minIdeal && r.judged()
}

// judged says whether a calm run's accuracy is a verdict: not when the
// lease TTL is shorter than the four round trips the node suggests (it
// costs accuracy, never a bound), nor a window shorter than four (a lease
// of its window's end arrives when little of it is left), nor with tokens
// only (a node far from the allocator then loses part of the rate, by
// design).
func (r Result) judged() bool {
	for _, k := range []string{"short-ttl", "short-window", "tokens-only"} {
		if slices.Contains(r.Kinds, k) {
			return false
		}
	}
	return true
}

// minIdeal is the least ideal a calm run is judged on: a run that could
// admit only a few tokens says nothing about accuracy.
const minIdeal = 200

// accuracyTarget is what a judged calm run must admit of the ideal: 0.97,
// 0.95 with nodes whose loops run late (saturated CPUs), 0.90 a second
// away.
func (r Result) accuracyTarget() float64 {
	switch {
	case slices.Contains(r.Kinds, "far"):
		return 0.90
	case slices.Contains(r.Kinds, "saturated"):
		return 0.95
	}
	return 0.97
}

// String is a short account of the result.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", r.Seed, r.Scenario)
	fmt.Fprintf(&b, "  admitted %d of ideal %d (%.3f, calm=%v), offered %d; %+v\n",
		r.Report.Admitted, r.Report.Ideal, r.Report.Ratio, r.Report.Calm, r.Report.Offered, r.Stats)
	for i, v := range r.Violations {
		if i == 5 {
			fmt.Fprintf(&b, "  ... %d more violations\n", len(r.Violations)-5)
			break
		}
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	if r.accuracyMissed() {
		fmt.Fprintf(&b, "  ACCURACY %.3f below %.2f\n", r.Report.Ratio, r.accuracyTarget())
	}
	if r.Trace != "" {
		b.WriteString(r.Trace)
	}
	return b.String()
}

// Run plays the scenario of seed to its end. It keeps no trace (every
// event's line formatted, most of them never read) unless the run fails
// or KeepTrace: then it plays the seed again, traced, for its account; a
// seed plays the same run traced or not (TestTraceChangesNothing).
func Run(seed uint64) Result {
	if KeepTrace {
		return RunScenario(seed, NewScenario(seed))
	}
	if res := runScenario(seed, NewScenario(seed), 0); !res.Failed() {
		return res
	}
	return RunScenario(seed, NewScenario(seed))
}

// RunScenario plays sc with the randomness of seed, keeping the trace of
// its last TraceLines events.
func RunScenario(seed uint64, sc *Scenario) Result { return runScenario(seed, sc, TraceLines) }

// runScenario plays sc with the randomness of seed; traceLines of 0 keeps
// no trace.
func runScenario(seed uint64, sc *Scenario, traceLines int) Result {
	w := newWorld(seed, sc, traceLines)
	defer w.close()
	w.start()
	for w.events.Len() > 0 {
		e := w.events.pop()
		if e.at > sc.Length {
			break
		}
		w.now = e.at
		e.fn()
	}
	rep := w.oracle.Finish(sc.Length)
	res := Result{Seed: seed, Scenario: sc.String(), Kinds: sc.Kinds(), Report: rep, Violations: rep.Violations, Stats: w.stats}
	if (res.Failed() || KeepTrace) && w.trace != nil {
		res.Trace = w.trace.String()
	}
	return res
}

func newWorld(seed uint64, sc *Scenario, traceLines int) *World {
	w := &World{sc: sc, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if traceLines > 0 {
		w.trace = newTrace(traceLines)
	}
	w.oracle = oracle.New(oracle.Config{Nodes: sc.givenNodes(), Fleet: sc.Nodes, CallTimeout: sc.callTimeout()})
	w.store = &storeClock{w: w}
	w.net = newNetwork(w)
	w.rules = sc.Rules
	w.alloc = newAllocator(w)
	for i := range sc.Nodes {
		w.nodes = append(w.nodes, newNode(w, i))
	}
	return w
}

func (w *World) close() { w.alloc.close() }

func (w *World) start() {
	for _, r := range w.rules.Rules() {
		if r.IsConcurrency() {
			w.oracle.SetSlotRule(0, slotRule(r))
			continue
		}
		w.oracle.SetRule(0, w.oracleRule(r))
	}
	for _, n := range w.nodes {
		n.boot()
	}
	w.sc.Load.start(w)
	w.sc.Faults.start(w)
}

// TraceLines is how many of a run's last events a failing seed's account
// prints (a test flag raises it to read a whole run).
var TraceLines = 200

// KeepTrace keeps the trace of a run that passed as well (a replayed seed).
var KeepTrace bool

// tracef notes one event for the failure trace.
func (w *World) tracef(format string, args ...any) {
	if w.trace == nil {
		return
	}
	w.trace.add(fmt.Sprintf("%9.3fs ", w.now.Seconds()) + fmt.Sprintf(format, args...))
}

// oracleRule is a rule as the oracle reads it: its fields, nothing of the
// code's.
func oracleRule(r *rules.Rule) oracle.Rule {
	alg := map[rules.Algorithm]oracle.Algorithm{rules.TokenBucket: oracle.TokenBucket, rules.FixedWindow: oracle.FixedWindow,
		rules.SlidingWindow: oracle.SlidingWindow, rules.SlidingLog: oracle.SlidingLog}[r.Algorithm]
	return oracle.Rule{Name: r.Name, Algorithm: alg, Limit: r.Limit, Period: r.Period, TTL: r.Lease.TTL, Burst: r.Burst,
		FailClosed: r.Failure == rules.FailClosed, Strict: r.Strict || r.Algorithm == rules.SlidingLog, Absence: r.Lease.Absence()}
}
