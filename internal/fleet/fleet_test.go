// Package fleet holds the fleet tests: a real allocator on a real Redis,
// eight SDK nodes in this process, a delay proxy of the test's own between
// each node and the allocator, and load offered at a multiple of the rule's
// rate. They measure what the fleet admits against the ideal and the
// bounds of docs/design.md (Guarantees). They run without the race detector (make test runs
// them on their own), since the load they offer is what is measured.
//
// Every fleet is cold: its nodes know the allocators and their own ids, no
// fleet size (Config.Nodes) and no key, so a new key's first requests wait
// for its first lease (docs/bounds.md, rule 1) and the allocator tells the
// nodes how many they are.
package fleet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// nodes is the size of every fleet here, but for a spec that says another.
const nodes = 8

var quiet = slog.New(slog.NewTextHandler(logSink(), nil))

// TestMain serves as a fleet's far side when the test binary is started as
// one (child_test.go). Otherwise it lets the light runs (t.Parallel) all
// run at once: they wait on the network, not on the CPU, and -parallel
// defaults to GOMAXPROCS, two here, which would queue them in pairs. A
// -parallel given on the command line is kept. The parallel runs with a
// real load take their turns (busy).
func TestMain(m *testing.M) {
	if os.Getenv(slotHolderEnv) != "" { // concurrency_test.go
		fmt.Fprintln(os.Stderr, "slot holder:", serveSlotHolder())
		os.Exit(1)
	}
	if os.Getenv(childEnv) != "" {
		if err := serveChild(); err != nil {
			fmt.Fprintln(os.Stderr, "fleet child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "32")
	}
	code := m.Run()
	closing.Wait()
	os.Exit(code)
}

// busy is how many parallel fleets under a real load (thousands of
// requests a second) run at once. Each takes about a third of a core
// between its nodes, its allocator, its proxies and Redis: a dozen at
// once on two cores measured the machine, not the lease (load moving
// between halves: 0.976 of the ideal alone, 0.82 beside the others).
var busy = make(chan struct{}, 3)

// takeTurn waits for a place among the busy fleets, held to the end of
// t. Call it before the fleet starts.
func takeTurn(t *testing.T) {
	busy <- struct{}{}
	t.Cleanup(func() { <-busy })
}

// closing counts the fleets still closing: each closes in the background
// once its test is done (a second or two at the longest distance, every
// node giving its tokens back over a round trip), while the next test
// runs; TestMain waits for them all.
var closing sync.WaitGroup

// fleet is one allocator and its proxies (a child process), and its
// nodes.
type fleet struct {
	s     spec
	rule  *rules.Rule
	child *child
	// slots are the places of the fleet's nodes; churn puts a new node in
	// one (replace).
	slots []*slot
	// gen numbers the nodes put in a slot, for their ids.
	gen int
}

// slot holds one node. Callers hold the read lock for their decisions, so
// that a node is never closed under one.
type slot struct {
	mu    sync.RWMutex
	c     *client.Client
	proxy string // the address of the node's own proxy to the allocator
}

// spec describes a fleet.
type spec struct {
	rule      string        // one rule in YAML, named "r"
	roundTrip time.Duration // between each node and the allocator
	nodes     int           // default: nodes
	// configured gives every node Config.Nodes, the fleet's size; a cold
	// fleet (the default) has none.
	configured bool
	// dial adds options to every node's connection (a slowed transport).
	dial []grpc.DialOption
}

func (s spec) size() int {
	if s.nodes > 0 {
		return s.nodes
	}
	return nodes
}

var (
	ruleMu  sync.Mutex
	ruleSeq int
)

// ruleName is a name no other fleet of this process or an earlier one
// uses on the shared Redis.
func ruleName() string {
	ruleMu.Lock()
	defer ruleMu.Unlock()
	ruleSeq++
	return fmt.Sprintf("f%d-%d", time.Now().UnixNano()%1e9, ruleSeq)
}

// newFleet starts the allocator on the shared test Redis and a proxy per
// node (a child process), then the nodes, and stops them all when the test
// ends.
func newFleet(t *testing.T, s spec) *fleet {
	t.Helper()
	yaml := "rules:\n" + strings.ReplaceAll(s.rule, "name: r", "name: "+ruleName())
	set, err := rules.Parse("test", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{s: s, rule: set.Rules()[0]}
	f.child = startChild(t, yaml, redistest.URL(t), s.size(), s.roundTrip)
	f.slots = make([]*slot, s.size())
	for i := range f.slots {
		f.slots[i] = &slot{proxy: f.child.proxies[i]}
	}
	// The nodes close together, then the child stops (closing).
	t.Cleanup(func() {
		closing.Go(func() {
			f.closeNodes()
			f.child.stop()
		})
	})
	var wg sync.WaitGroup
	errs := make([]error, len(f.slots))
	for i, sl := range f.slots {
		wg.Go(func() { // New waits a round trip for the rules: start the nodes together
			sl.c, errs[i] = f.newNode(sl, fmt.Sprintf("node-%d", i))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	f.gen = len(f.slots)
	return f
}

// closeNodes closes the fleet's nodes together, each once no caller
// decides on it.
func (f *fleet) closeNodes() {
	var wg sync.WaitGroup
	for _, sl := range f.slots {
		wg.Go(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			if sl.c != nil {
				sl.c.Close()
			}
		})
	}
	wg.Wait()
}

// newNode starts a node behind the slot's proxy. It knows the allocator
// and its own id, and no more: the fleet's size comes from the allocator.
func (f *fleet) newNode(sl *slot, id string) (*client.Client, error) {
	rtt := f.s.roundTrip
	cfg := client.Config{
		Allocators: []string{sl.proxy}, NodeID: id,
		Registerer: prometheus.NewRegistry(), Logger: quiet, DialOptions: f.s.dial,
		StartTimeout: 3*rtt + 2*time.Second, RPCTimeout: 2*rtt + 250*time.Millisecond,
	}
	if f.s.configured {
		cfg.Nodes = len(f.slots)
	}
	return client.New(cfg)
}

// replace closes the node in slot i and puts a new one, with a new id, in
// its place, as a deployment replaces a process. Its callers wait
// meanwhile (the load sheds what they cannot offer).
func (f *fleet) replace(i int) error {
	sl := f.slots[i]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.c.Close()
	f.gen++
	c, err := f.newNode(sl, fmt.Sprintf("node-%d", f.gen))
	if err != nil {
		return err // (its callers are refused by the closed node)
	}
	sl.c = c
	return nil
}

func logSink() io.Writer {
	if os.Getenv("FLEET_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// load is the load offered to a fleet.
type load struct {
	// rate is what node is offered, requests per second, at elapsed into
	// the run.
	rate func(node int, elapsed time.Duration) float64
	// peak is the most any node is offered, requests per second: a caller
	// wakes often enough to offer it evenly, no more often (a slow rule's
	// callers need not tick 500 times a second).
	peak float64
	// callers is the goroutines per node that share its rate; default 1.
	callers int
	// spin makes the callers spin on their pace instead of sleeping
	// between requests: they take every CPU they can, as a service's own
	// work does when it saturates its node.
	spin bool
}

// uniform offers each node its part of multiple times the rule's rate.
func uniform(r *rules.Rule, multiple float64) load {
	each := multiple * r.Rate() / nodes
	return load{rate: func(int, time.Duration) float64 { return each }, peak: each}
}

// quietPeriods offers multiple times the rule's rate on average, in
// bursts: each node is offered twice that during the first 1.5 s of every
// 3 s, and nothing in the rest. On a run that starts with a store window
// (a window rule's, see run), a 1 s window is loaded from its start after
// a window with no request at all, the next is loaded for its first half,
// and the third is quiet.
func quietPeriods(r *rules.Rule, multiple float64) load {
	on := 2 * multiple * r.Rate() / nodes
	const cycle, busy = 3 * time.Second, 1500 * time.Millisecond
	return load{rate: func(_ int, elapsed time.Duration) float64 {
		if elapsed%cycle < busy {
			return on
		}
		return 0
	}, peak: on}
}

// run offers l to every node for d, open loop: a caller that falls more
// than 50ms behind its pace drops the excess, as a real service sheds what
// it cannot take. It records every admission's instant. A window rule's
// run starts with one of the store's windows, so that its first window is
// a whole one: from a random instant, the first window's ideal would be
// the limit however little of the window was left.
func (f *fleet) run(d time.Duration, l load) *run {
	if p := f.rule.Period; f.rule.Algorithm == rules.FixedWindow {
		time.Sleep(time.Until(time.Now().Truncate(p).Add(p)))
	}
	callers := max(l.callers, 1)
	step := 2 * time.Millisecond
	if l.peak > 0 {
		step = min(max(time.Duration(float64(time.Second)*float64(callers)/l.peak), step), 20*time.Millisecond)
	}
	cpu := cpuTime()
	busy, total := machineTicks()
	r := newRun(f.rule, d, len(f.slots))
	ctx, cancel := context.WithTimeout(context.Background(), d+f.s.roundTrip+time.Second)
	defer cancel() // (a caller waiting on a first lease at the end is let go)
	var wg sync.WaitGroup
	for i, sl := range f.slots {
		for range callers {
			wg.Go(func() {
				rate := func(el time.Duration) float64 { return l.rate(i, el) / float64(callers) }
				r.drive(ctx, sl, i, rate, step, l.spin)
			})
		}
	}
	wg.Wait()
	r.cpu = cpuTime() - cpu
	if busy1, total1 := machineTicks(); total1 > total {
		r.machine = float64(busy1-busy) / float64(total1-total) * float64(runtime.NumCPU())
	}
	r.finish()
	return r
}

// drive is one caller of a node.
func (r *run) drive(ctx context.Context, sl *slot, node int, rate func(time.Duration) float64, step time.Duration, spin bool) {
	var tick *time.Ticker
	if !spin {
		tick = time.NewTicker(step)
		defer tick.Stop()
	}
	var admitted []int64
	defer func() { r.add(node, admitted) }()
	owed := 0.0
	if rate(0) > 0 {
		owed = 1 // every node's first request at the start
	}
	last := r.start
	for {
		if !spin {
			<-tick.C
		}
		now := time.Now()
		el := now.Sub(r.start)
		if el >= r.length {
			return
		}
		rt := rate(el)
		owed += rt * now.Sub(last).Seconds()
		last = now
		owed = min(owed, rt*0.05+1)
		if owed < 1 {
			continue
		}
		r.offer(el, int64(owed))
		sl.mu.RLock()
		for ; owed >= 1; owed-- {
			d, err := sl.c.AllowN(ctx, r.rule.Name, "k", 1)
			if err != nil {
				continue
			}
			if d.Mode == client.ModeFallback {
				r.fallback[node].Add(1)
			}
			if d.Allowed {
				// The instant after the decision: a request that waited
				// for its key's first lease was admitted when the lease
				// came, at the end of its wait; any other decision takes
				// a few microseconds (4 µs at the 99.9th percentile here).
				admitted = append(admitted, int64(time.Since(r.start)))
				r.perNode[node].Add(1)
			}
		}
		sl.mu.RUnlock()
	}
}
