// Package fleet holds the fleet tests: a real allocator on a real Redis,
// eight SDK nodes in this process, a delay proxy of the test's own between
// each node and the allocator, and load offered at a multiple of the rule's
// rate. They measure what the fleet admits against the ideal and the
// bounds of DESIGN.md. They run without the race detector (make test runs
// them on their own), since the load they offer is what is measured.
package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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

// nodes is the size of every fleet here.
const nodes = 8

var quiet = slog.New(slog.NewTextHandler(logSink(), nil))

// fleet is one allocator, its proxies and its nodes.
type fleet struct {
	t       *testing.T
	rule    *rules.Rule
	alloc   *allocator.Allocator
	proxies []*netdelay.Proxy
	nodes   []*client.Client
}

// spec describes a fleet.
type spec struct {
	rule      string        // one rule in YAML, named "r"
	roundTrip time.Duration // between each node and the allocator
	// dial adds options to every node's connection (a slowed transport).
	dial []grpc.DialOption
	// tokensOnly makes the nodes lease tokens only, without rate shares.
	tokensOnly bool
}

var ruleSeq atomic.Int64

// newFleet starts the allocator on the shared test Redis, a proxy per node
// and the nodes, and stops them all when the test ends.
func newFleet(t *testing.T, s spec) *fleet {
	t.Helper()
	name := fmt.Sprintf("f%d-%d", time.Now().UnixNano()%1e9, ruleSeq.Add(1))
	set, err := rules.Parse("test", []byte("rules:\n"+strings.ReplaceAll(s.rule, "name: r", "name: "+name)))
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t}
	f.rule, _ = set.Get(name)
	f.alloc, err = allocator.New(allocator.Config{Rules: set, RedisURL: redistest.URL(t), StoreTimeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.alloc.Serve() }()
	t.Cleanup(func() { f.alloc.Stop(); <-served })
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	f.nodes = make([]*client.Client, nodes)
	for i := range nodes {
		p, err := netdelay.Start(f.alloc.Addr(), s.roundTrip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		f.proxies = append(f.proxies, p)
		wg.Add(1)
		go func() { // New waits a round trip for the rules: start the nodes together
			defer wg.Done()
			f.nodes[i], errs[i] = client.New(client.Config{
				Allocators: []string{p.Addr()}, NodeID: fmt.Sprintf("node-%d", i), Nodes: nodes,
				Registerer: prometheus.NewRegistry(), Logger: quiet, DialOptions: s.dial,
				StartTimeout: 3*s.roundTrip + 2*time.Second, RPCTimeout: 2*s.roundTrip + 250*time.Millisecond,
				Lease: client.LeaseConfig{TokensOnly: s.tokensOnly},
			})
		}()
	}
	wg.Wait()
	for i, n := range f.nodes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { n.Close() })
	}
	return f
}

// binWidth is the resolution of the admission timeline.
const binWidth = 100 * time.Millisecond

// run is what the fleet admitted under one load.
type run struct {
	rule     *rules.Rule
	length   time.Duration
	offered  atomic.Int64
	bins     []atomic.Int64 // admitted per binWidth, fleet-wide
	perNode  []atomic.Int64
	fallback atomic.Int64 // decisions made in fallback
	// first and last are when the first and the last request were offered
	// (unix ns): a perfect limiter admits the burst and the rate between
	// them, no more.
	first, last atomic.Int64
}

// load offers, to each node, rates(node, elapsed) requests per second for
// d, open loop: a node that falls more than 50ms behind drops the excess,
// as a real service sheds what it cannot take.
func (f *fleet) load(d time.Duration, rates func(node int, elapsed time.Duration) float64) *run {
	r := &run{rule: f.rule, length: d, bins: make([]atomic.Int64, int(d/binWidth)+1), perNode: make([]atomic.Int64, nodes)}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.drive(ctx, n, i, start, rates)
		}()
	}
	wg.Wait()
	return r
}

func (r *run) drive(ctx context.Context, n *client.Client, node int, start time.Time, rates func(int, time.Duration) float64) {
	const step = 2 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	owed := 1.0 // every node's first request at the start
	last := start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			rate := rates(node, now.Sub(start))
			owed += rate * now.Sub(last).Seconds()
			last = now
			owed = min(owed, rate*0.05+1)
			bin := int(now.Sub(start) / binWidth)
			if owed >= 1 {
				r.first.CompareAndSwap(0, now.UnixNano())
				for at := now.UnixNano(); ; {
					if l := r.last.Load(); l >= at || r.last.CompareAndSwap(l, at) {
						break
					}
				}
			}
			for ; owed >= 1; owed-- {
				r.offered.Add(1)
				d, err := n.AllowN(ctx, r.rule.Name, "k", 1)
				if err != nil {
					continue
				}
				if d.Mode == client.ModeFallback {
					r.fallback.Add(1)
				}
				if d.Allowed && bin < len(r.bins) {
					r.bins[bin].Add(1)
					r.perNode[node].Add(1)
				}
			}
		}
	}
}

func (r *run) admitted() (sum int64) {
	for i := range r.bins {
		sum += r.bins[i].Load()
	}
	return sum
}

// ideal is what a perfect limiter admits: the burst and the rate from the
// first request offered to the last, or what was offered if that is less.
// (For a slow rule, the rate after the last request would be a few tokens
// no limiter could admit.)
func (r *run) ideal() float64 {
	span := time.Duration(r.last.Load() - r.first.Load()).Seconds()
	return min(float64(r.offered.Load()), float64(r.rule.Burst)+r.rule.Rate()*span)
}

// worstWindow is the most admitted in any window of the given number of
// bins.
func (r *run) worstWindow(width int) int64 {
	var worst int64
	for start := 0; start+width <= len(r.bins); start++ {
		var n int64
		for i := start; i < start+width; i++ {
			n += r.bins[i].Load()
		}
		worst = max(worst, n)
	}
	return worst
}

// checkBounds fails the test if any window of a second or more admitted
// more than burst + rate·(T + ttl), or any one-second window more than
// burst + 1.1·rate (guarantee 2 of DESIGN.md).
func (r *run) checkBounds(t *testing.T) {
	t.Helper()
	burst, rate, ttl := float64(r.rule.Burst), r.rule.Rate(), r.rule.Lease.TTL.Seconds()
	per := int(time.Second / binWidth)
	if w := float64(r.worstWindow(per)); w > burst+1.1*rate {
		t.Errorf("worst 1s window admitted %.0f > burst + 1.1·rate = %.0f", w, burst+1.1*rate)
	}
	for width := per; width <= len(r.bins); width++ {
		T := float64(width) * binWidth.Seconds()
		if w := float64(r.worstWindow(width)); w > burst+rate*(T+ttl) {
			t.Errorf("a %.1fs window admitted %.0f > burst + rate·(T + ttl) = %.0f", T, w, burst+rate*(T+ttl))
			return
		}
	}
}

// report logs the run's figures and returns admitted/ideal.
func (r *run) report(t *testing.T, what string) float64 {
	t.Helper()
	a, ideal := r.admitted(), r.ideal()
	rate := r.rule.Rate()
	t.Logf("%s: admitted %d of ideal %.0f = %.3f; worst 1s window %d (%.2f of burst + rate); fallback decisions %d of %d offered",
		what, a, ideal, float64(a)/ideal, r.worstWindow(int(time.Second/binWidth)),
		float64(r.worstWindow(int(time.Second/binWidth)))/(float64(r.rule.Burst)+rate), r.fallback.Load(), r.offered.Load())
	if os.Getenv("FLEET_LOG") != "" {
		var b strings.Builder
		for i := range r.bins {
			fmt.Fprintf(&b, " %d", r.bins[i].Load())
		}
		t.Logf("admitted per %v:%s", binWidth, b.String())
	}
	return float64(a) / ideal
}

// uniform offers each node its part of multiple times the rule's rate.
func uniform(r *rules.Rule, multiple float64) func(int, time.Duration) float64 {
	each := multiple * r.Rate() / nodes
	return func(int, time.Duration) float64 { return each }
}

func logSink() io.Writer {
	if os.Getenv("FLEET_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}
