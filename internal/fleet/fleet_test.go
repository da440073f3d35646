// Package fleet holds the fleet tests: a real allocator on a real Redis,
// eight SDK nodes in this process, a delay proxy of the test's own between
// each node and the allocator, and load offered at a multiple of the rule's
// rate. They measure what the fleet admits against the ideal and the
// bounds of DESIGN.md. They run without the race detector (make test runs
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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/netdelay"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// nodes is the size of every fleet here, but for a spec that says another.
const nodes = 8

var quiet = slog.New(slog.NewTextHandler(logSink(), nil))

// TestMain lets the light runs (t.Parallel) all run at once: they wait on
// the network, not on the CPU, and -parallel defaults to GOMAXPROCS, two
// here, which would queue them in pairs. A -parallel given on the command
// line is kept.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}

// fleet is one allocator, its proxies and its nodes.
type fleet struct {
	t     *testing.T
	s     spec
	rule  *rules.Rule
	alloc *allocator.Allocator
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
	proxy *netdelay.Proxy
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

// newFleet starts the allocator on the shared test Redis, a proxy per node
// and the nodes, and stops them all when the test ends.
func newFleet(t *testing.T, s spec) *fleet {
	t.Helper()
	name := ruleName()
	set, err := rules.Parse("test", []byte("rules:\n"+strings.ReplaceAll(s.rule, "name: r", "name: "+name)))
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, s: s}
	f.rule, _ = set.Get(name)
	f.alloc, err = allocator.New(allocator.Config{Rules: set, RedisURL: redistest.URL(t), StoreTimeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.alloc.Serve() }()
	t.Cleanup(func() { f.alloc.Stop(); <-served })
	f.slots = make([]*slot, s.size())
	for i := range f.slots {
		p, err := netdelay.Start(f.alloc.Addr(), s.roundTrip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		f.slots[i] = &slot{proxy: p}
	}
	// Closed together: each Close gives its tokens back over a round trip,
	// a second each at the longest distance. (Registered after the
	// proxies', so it runs before them.)
	t.Cleanup(func() {
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

// newNode starts a node behind the slot's proxy. It knows the allocator
// and its own id, and no more: the fleet's size comes from the allocator.
func (f *fleet) newNode(sl *slot, id string) (*client.Client, error) {
	rtt := f.s.roundTrip
	cfg := client.Config{
		Allocators: []string{sl.proxy.Addr()}, NodeID: id,
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
	sl.c = c
	return err
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
	// the run, at the wall-clock instant wall (the store's windows are
	// wall-clock seconds).
	rate func(node int, elapsed time.Duration, wall time.Time) float64
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
	return load{rate: func(int, time.Duration, time.Time) float64 { return each }}
}

// quietPeriods offers multiple times the rule's rate on average, in
// bursts: each node is offered twice that during the first 1.5 s of every
// 3 s of wall-clock time, and nothing in the rest. A 1 s store window is
// then loaded from its start after a window with no request at all, the
// next is loaded for its first half, the third is quiet.
func quietPeriods(r *rules.Rule, multiple float64) load {
	on := 2 * multiple * r.Rate() / nodes
	const cycle, busy = 3 * time.Second, 1500 * time.Millisecond
	return load{rate: func(_ int, _ time.Duration, wall time.Time) float64 {
		if time.Duration(wall.UnixNano()%int64(cycle)) < busy {
			return on
		}
		return 0
	}}
}

// run offers l to every node for d, open loop: a caller that falls more
// than 50ms behind its pace drops the excess, as a real service sheds what
// it cannot take. It records every admission's instant.
func (f *fleet) run(d time.Duration, l load) *run {
	r := newRun(f.rule, d, len(f.slots))
	ctx, cancel := context.WithTimeout(context.Background(), d+f.s.roundTrip+time.Second)
	defer cancel() // (a caller waiting on a first lease at the end is let go)
	callers := max(l.callers, 1)
	var wg sync.WaitGroup
	for i, sl := range f.slots {
		for range callers {
			wg.Go(func() {
				rate := func(el time.Duration, wall time.Time) float64 { return l.rate(i, el, wall) / float64(callers) }
				r.drive(ctx, sl, i, rate, l.spin)
			})
		}
	}
	wg.Wait()
	r.finish()
	return r
}

// drive is one caller of a node.
func (r *run) drive(ctx context.Context, sl *slot, node int, rate func(time.Duration, time.Time) float64, spin bool) {
	const step = 2 * time.Millisecond
	var tick *time.Ticker
	if !spin {
		tick = time.NewTicker(step)
		defer tick.Stop()
	}
	var admitted []int64
	defer func() { r.add(admitted) }()
	owed := 0.0
	if rate(0, r.start) > 0 {
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
		rt := rate(el, now)
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
				// After the decision: a request that waited for its key's
				// first lease was admitted when the lease came, and a
				// window's tokens are spent no later than they may be.
				admitted = append(admitted, int64(time.Since(r.start)))
				r.perNode[node].Add(1)
			}
		}
		sl.mu.RUnlock()
	}
}
