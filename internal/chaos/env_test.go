package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clienthook"
	"github.com/allot-dev/allot/internal/netdelay"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// nodes is the size of every fleet here.
const nodes = 8

// The rules every scenario runs: the open rule is under load at twice its
// rate; the closed one, lightly loaded, must never admit without the
// allocator.
const (
	openRule   = "open"
	closedRule = "closed"
)

func tokenBucket(name, failure string) string {
	return fmt.Sprintf(`  - name: %s
    algorithm: token_bucket
    limit: 2000
    period: 1s
    burst: 200
    failure: %s
    lease: { ttl: 1s }
`, name, failure)
}

func fixedWindow(name string) string {
	return fmt.Sprintf(`  - name: %s
    algorithm: fixed_window
    limit: 2000
    period: 1s
    failure: open
    lease: { ttl: 1s }
`, name)
}

// closedLoad is the closed rule's offered load per node: far below its
// limit, so that every refusal is the failure mode's.
const closedLoad = 25

// env is one scenario's world: a Redis and allocator processes, or one
// in-process allocator on the memory store, and the nodes.
type env struct {
	t     *testing.T
	rules *rules.Set

	redis      *redistest.Server
	storeProxy *netdelay.Proxy // between the allocators and Redis, if slowed
	allocs     []*allocProc

	memory     *store.Memory // the in-process allocator's store
	storeClock *steppedClock
	inproc     *allocator.Allocator
	served     chan error

	proxies []*netdelay.Proxy // one per node, if cut off
	clocks  []*steppedClock   // one per node
	loss    *replyLoss
	slots   []*slot
}

// slot is a place in the fleet; churn puts a new node in it. Callers hold
// the read lock for a decision, so that a node is never closed under one.
type slot struct {
	mu  sync.RWMutex
	c   *client.Client
	reg *prometheus.Registry // the node's metrics
	gen int
}

func (s *slot) allow(rule string) (client.Decision, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c.AllowN(context.Background(), rule, "k", 1)
}

// topology says what a scenario runs on.
type topology struct {
	allocators int  // allocator processes on Redis; 0: one in-process allocator on a memory store
	slowStore  bool // the allocators reach Redis through a delay proxy
	proxied    bool // each node reaches the allocator through a proxy of its own
	lossEvery  int64
	window     bool // the open rule is a fixed window
}

func newEnv(t *testing.T, top topology) *env {
	t.Helper()
	e := &env{t: t, storeClock: &steppedClock{}}
	yaml := "rules:\n" + tokenBucket(openRule, "open") + tokenBucket(closedRule, "closed")
	if top.window {
		yaml = "rules:\n" + fixedWindow(openRule) + tokenBucket(closedRule, "closed")
	}
	set, err := rules.Parse("chaos", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e.rules = set
	var addrs []string
	if top.allocators == 0 {
		e.memory = store.NewMemory(e.storeClock)
		e.inproc, err = allocator.New(allocator.Config{Rules: set, Store: e.memory, Logger: logger()})
		if err != nil {
			t.Fatal(err)
		}
		e.served = make(chan error, 1)
		go func() { e.served <- e.inproc.Serve() }()
		addrs = []string{e.inproc.Addr()}
	} else {
		rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(rulesFile, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		e.redis = redistest.Start(t)
		redisURL := e.redis.URL()
		if top.slowStore {
			if e.storeProxy, err = netdelay.Start(e.redis.Addr(), 0); err != nil {
				t.Fatal(err)
			}
			redisURL = "redis://" + e.storeProxy.Addr() + "/0"
		}
		for range top.allocators {
			p := startAllocator(t, freeAddr(t), redisURL, rulesFile)
			e.allocs = append(e.allocs, p)
			addrs = append(addrs, p.addr)
		}
	}
	if top.lossEvery > 0 {
		e.loss = newReplyLoss(top.lossEvery)
	}
	t.Cleanup(e.close)
	e.slots = make([]*slot, nodes)
	e.clocks = make([]*steppedClock, nodes)
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	for i := range nodes {
		e.clocks[i] = &steppedClock{}
		dial := addrs
		if top.proxied {
			p, err := netdelay.Start(addrs[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			e.proxies = append(e.proxies, p)
			dial = []string{p.Addr()}
		}
		wg.Add(1)
		go func() { // New waits for the rules: start the nodes together
			defer wg.Done()
			e.slots[i] = &slot{reg: prometheus.NewRegistry()}
			e.slots[i].c, errs[i] = e.newNode(i, 0, dial, e.slots[i].reg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// newNode starts the node of generation gen in slot i.
func (e *env) newNode(i, gen int, allocators []string, reg *prometheus.Registry) (*client.Client, error) {
	var dial []grpc.DialOption
	if e.loss != nil {
		dial = append(dial, e.loss.dialOption())
	}
	id := fmt.Sprintf("node-%d", i)
	if gen > 0 {
		id = fmt.Sprintf("node-%d.%d", i, gen)
	}
	cfg := client.Config{Allocators: allocators, NodeID: id, Nodes: nodes, Registerer: reg,
		Logger: logger(), DialOptions: dial, StartTimeout: 5 * time.Second}
	clienthook.SetClock(&cfg, e.clocks[i])
	return client.New(cfg)
}

// allocatorAddrs is where a node of this env dials.
func (e *env) allocatorAddrs(i int) []string {
	if e.proxies != nil {
		return []string{e.proxies[i].Addr()}
	}
	if e.inproc != nil {
		return []string{e.inproc.Addr()}
	}
	var addrs []string
	for _, p := range e.allocs {
		addrs = append(addrs, p.addr)
	}
	return addrs
}

// replace closes slot i's node and puts a new one, with a new identity,
// in its place, as a deploy or an autoscaler does.
func (e *env) replace(i int) error {
	s := e.slots[i]
	reg := prometheus.NewRegistry()
	c, err := e.newNode(i, s.gen+1, e.allocatorAddrs(i), reg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.c
	s.c, s.reg = c, reg
	s.gen++
	s.mu.Unlock()
	return old.Close()
}

// close stops everything the env started: nodes first (they give their
// leases back), then proxies, allocators and Redis. It may run twice.
func (e *env) close() {
	for _, s := range e.slots {
		if s != nil && s.c != nil {
			s.c.Close()
		}
	}
	for _, p := range e.proxies {
		p.Close()
	}
	if e.inproc != nil {
		e.inproc.Stop()
		<-e.served
		e.inproc = nil
		e.memory.Close()
	}
	for _, p := range e.allocs {
		p.kill()
	}
	if e.storeProxy != nil {
		e.storeProxy.Close()
	}
	if e.redis != nil {
		e.redis.Kill()
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// logger is quiet unless CHAOS_LOG is set.
func logger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("CHAOS_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// drive offers the load to every node for the measure's length, twice the
// open rule's rate and closedLoad on the closed rule, and runs the
// fault's timeline meanwhile on the calling goroutine.
func (e *env) drive(m *measure, timeline func()) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.start = time.Now()
	var wg sync.WaitGroup
	each := 2 * m.open.Rate() / nodes
	for i, s := range e.slots {
		wg.Add(2)
		go func() {
			defer wg.Done()
			offer(ctx, each, func() { m.decideOpen(s, i) })
		}()
		go func() {
			defer wg.Done()
			offer(ctx, closedLoad, func() { m.decideClosed(s, closedRule) })
		}()
	}
	timeline()
	sleepUntil(m.start.Add(m.length))
	cancel()
	wg.Wait()
}

// ejections is how many times the nodes ejected the allocator at addr.
func (e *env) ejections(addr string) (sum float64) {
	e.metric("allot_client_allocator_ejections_total", func(labels map[string]string, v float64) {
		if labels["allocator"] == addr {
			sum += v
		}
	})
	return sum
}

// roundTrip is the longest Acquire round trip a node measures.
func (e *env) roundTrip() (longest time.Duration) {
	e.metric("allot_client_allocator_round_trip_seconds", func(_ map[string]string, v float64) {
		longest = max(longest, time.Duration(v*float64(time.Second)))
	})
	return longest
}

// metric calls f with the labels and value of every node's samples of
// the named counter or gauge. A node takes its metrics along when it
// closes: read them before.
func (e *env) metric(name string, f func(labels map[string]string, v float64)) {
	for _, s := range e.slots {
		s.mu.RLock()
		families, err := s.reg.Gather()
		s.mu.RUnlock()
		if err != nil {
			e.t.Errorf("node metrics: %v", err)
			return
		}
		for _, fam := range families {
			if fam.GetName() != name {
				continue
			}
			for _, m := range fam.GetMetric() {
				labels := make(map[string]string)
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				f(labels, m.GetCounter().GetValue()+m.GetGauge().GetValue())
			}
		}
	}
}
