package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/netdelay"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// pairRules are outageRules and a strict rule, decided by a Check per
// request: a Check that no allocator answers is a denial in fallback mode.
const pairRules = outageRules + `
  - name: login
    algorithm: token_bucket
    limit: 1000000
    period: 1s
    strict: true
    failure: closed
`

// pair is two allocators on one Redis and nodes that know both; the second
// may be reached through a proxy that can black-hole it.
type pair struct {
	*fleet
	url    string
	allocs [2]*allocator.Allocator
	served [2]chan error
	listen [2]string // where each allocator listens
	dialed [2]string // what nodes dial: the allocator, or the proxy before it
	proxy  *netdelay.Proxy
	regs   []*prometheus.Registry
}

func newPair(t *testing.T, nodes int, proxied bool) *pair {
	t.Helper()
	set, err := rules.Parse("test", []byte(pairRules))
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{fleet: &fleet{t: t, set: set}, url: redistest.Start(t).URL()}
	for i := range p.allocs {
		p.start(i, "127.0.0.1:0")
		p.listen[i], p.dialed[i] = p.allocs[i].Addr(), p.allocs[i].Addr()
		t.Cleanup(func() { p.stop(i) })
	}
	if proxied {
		if p.proxy, err = netdelay.Start(p.listen[1], 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.proxy.Close() })
		p.dialed[1] = p.proxy.Addr()
	}
	for i := range nodes {
		reg := prometheus.NewRegistry()
		// A strict decision may take half a second: the race detector on two
		// busy cores can hold a healthy allocator's answer past the default
		// 100ms, and these tests are about sick allocators, not slow ones.
		n, err := client.New(client.Config{Allocators: p.dialed[:], NodeID: fmt.Sprintf("node-%d", i), Nodes: nodes,
			Registerer: reg, CheckTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		p.nodes, p.regs = append(p.nodes, n), append(p.regs, reg)
	}
	return p
}

// runWithStrict drives "hot" at twice its limit, and "login", a strict
// rule, at 100 requests a second per node, for d; between runs as in run.
func (p *pair) runWithStrict(strict **load, d time.Duration, between func(sec int)) *load {
	r, _ := p.set.Get("hot")
	done := make(chan struct{})
	go func() {
		defer close(done)
		*strict = p.run("login", "k", uniform(len(p.nodes), 100), d, nil)
	}()
	l := p.run("hot", "k", uniform(len(p.nodes), 2*float64(r.Limit)/float64(len(p.nodes))), d, between)
	<-done
	return l
}

func (p *pair) start(i int, listen string) {
	p.t.Helper()
	a, err := allocator.New(allocator.Config{Listen: listen, Rules: p.set, RedisURL: p.url, StoreTimeout: time.Second})
	if err != nil {
		p.t.Fatal(err)
	}
	p.allocs[i], p.served[i] = a, make(chan error, 1)
	go func() { p.served[i] <- a.Serve() }()
}

// stop stops allocator i at once, as a crash.
func (p *pair) stop(i int) {
	if p.allocs[i] == nil {
		return
	}
	p.allocs[i].Stop()
	<-p.served[i]
	p.allocs[i] = nil
}

// ejected is each node's allot_client_allocator_ejected for allocator i:
// -1 where the metric is missing.
func (p *pair) ejected(i int) []float64 {
	v := make([]float64, len(p.regs))
	for n, reg := range p.regs {
		v[n] = metricValue(p.t, reg, "allot_client_allocator_ejected", "allocator", p.dialed[i])
	}
	return v
}

// ejections is each node's allot_client_allocator_ejections_total for
// allocator i.
func (p *pair) ejections(i int) []float64 {
	v := make([]float64, len(p.regs))
	for n, reg := range p.regs {
		v[n] = metricValue(p.t, reg, "allot_client_allocator_ejections_total", "allocator", p.dialed[i])
	}
	return v
}

// failedAcquires sums the nodes' Acquire calls that failed.
func (p *pair) failedAcquires() (sum float64) {
	for _, reg := range p.regs {
		sum += max(metricValue(p.t, reg, "allot_client_lease_requests_total", "result", "error"), 0)
	}
	return sum
}

// metricValue is the value of a gauge or counter with the label name=value
// (any, with name ""), or -1 when the registry has none.
func metricValue(t *testing.T, reg *prometheus.Registry, metric, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := name == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == name && l.GetValue() == value
			}
			if !match {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

func all(vs []float64, want float64) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return true
}

// fallbackIn sums the fallback decisions of seconds [from, to). The last
// second of a run is its tail, where callers' contexts end: a decision
// that runs out of its caller's time is no fault of the allocators.
func (l *load) fallbackIn(from, to int) (sum int64) {
	for s := from; s < to; s++ {
		sum += l.fallback[s].Load()
	}
	return sum
}

// One of two allocators crashes: calls it was given go to the other, so no
// node ever falls back and no Acquire fails; the dead one is ejected.
func TestStoppedAllocatorAmongTwoKeepsNodesOnLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("4s fleet run")
	}
	p := newPair(t, 4, false)
	r, _ := p.set.Get("hot")
	for _, n := range p.nodes {
		leased(t, n, "hot", "k")
	}
	failed0 := p.failedAcquires()
	var strict *load
	l := p.runWithStrict(&strict, 4*time.Second, func(sec int) {
		if sec == 1 {
			p.stop(1)
		}
	})
	for s := range 4 {
		t.Logf("second %d: admitted %d, fallback decisions %d, strict decisions in fallback %d",
			s, l.second(s), l.fallback[s].Load(), strict.fallback[s].Load())
	}
	failed := p.failedAcquires() - failed0
	t.Logf("fallback decisions %d, strict decisions in fallback %d, failed Acquires %v, ejected %v",
		l.fallbackIn(0, 4), strict.fallbackIn(0, 4), failed, p.ejected(1))
	if n := l.fallbackIn(0, 4) + strict.fallbackIn(0, 4); n != 0 {
		t.Errorf("%d fallback decisions with one allocator of two answering", n)
	}
	if failed != 0 {
		t.Errorf("%v Acquire calls failed with one allocator of two answering", failed)
	}
	if e := p.ejected(1); !all(e, 1) {
		t.Errorf("the stopped allocator is ejected %v on the nodes, want 1 on each", e)
	}
	if e := p.ejected(0); !all(e, 0) {
		t.Errorf("the live allocator is ejected %v on the nodes, want 0 on each", e)
	}
	if after := l.second(2) + l.second(3); float64(after) < 0.9*2*r.Rate() {
		t.Errorf("admitted %d in the 2s after the crash, under 90%% of %.0f", after, 2*r.Rate())
	}
}

// One of two allocators hangs: its connections stay open and hear nothing,
// as a SIGSTOPped process. Nodes stay on leases (a call it does not answer
// is retried on the other within the call's deadline), it is ejected rather
// than flapped between, and it comes back once it answers health probes.
func TestHungAllocatorIsEjectedThenProbedBack(t *testing.T) {
	if testing.Short() {
		t.Skip("6s fleet run")
	}
	p := newPair(t, 4, true)
	r, _ := p.set.Get("hot")
	for _, n := range p.nodes {
		leased(t, n, "hot", "k")
	}
	failed0 := p.failedAcquires()
	var during, times, times0, ejected0 []float64
	var failedDuring float64
	var strict *load
	l := p.runWithStrict(&strict, 6*time.Second, func(sec int) {
		switch sec {
		case 1:
			// Ejections count from the cut: on a busy machine a slow
			// answer before it may eject the allocator (and a call
			// restore it), which is not the hang's doing; one still out
			// at the cut stays out without a new ejection.
			times0, ejected0 = p.ejections(1), p.ejected(1)
			p.proxy.Cut(true)
		case 4:
			during, times, failedDuring = p.ejected(1), p.ejections(1), p.failedAcquires()-failed0
			for i := range times {
				times[i] -= max(times0[i], 0) // -1: none yet
			}
			p.proxy.Cut(false)
		}
	})
	for s := range 6 {
		t.Logf("second %d: admitted %d, fallback decisions %d, strict decisions in fallback %d",
			s, l.second(s), l.fallback[s].Load(), strict.fallback[s].Load())
	}
	hung, hungStrict := l.fallbackIn(1, 4), strict.fallbackIn(1, 4)
	t.Logf("while hung: fallback decisions %d, strict decisions in fallback %d, failed Acquires %v, ejected %v, ejections %v",
		hung, hungStrict, failedDuring, during, times)
	if hung+hungStrict != 0 {
		t.Errorf("%d fallback decisions (%d of them strict) while one allocator of two hung", hung+hungStrict, hungStrict)
	}
	if n := l.fallbackIn(0, 6) + strict.fallbackIn(0, 6) - hung - hungStrict; n != 0 {
		t.Errorf("%d fallback decisions around the hang", n)
	}
	if failedDuring != 0 {
		t.Errorf("%v Acquire calls failed while one allocator of two hung", failedDuring)
	}
	if !all(during, 1) {
		t.Errorf("the hung allocator is ejected %v on the nodes, want 1 on each", during)
	}
	for i, n := range times {
		if n != 1 && (n != 0 || ejected0[i] != 1) {
			t.Errorf("the hung allocator was ejected %v times on the nodes during the hang (out at the cut: %v), want once each, or none on a node where it was already out: not flapped between", times, ejected0)
			break
		}
	}
	if in := l.second(2) + l.second(3); float64(in) < 0.9*2*r.Rate() {
		t.Errorf("admitted %d in seconds 2-3 with one allocator hung, under 90%% of %.0f", in, 2*r.Rate())
	}
	// Answering again, it is probed back in, and serves.
	waitUntil(t, 10*time.Second, func() bool { return all(p.ejected(1), 0) }, "every node to restore the allocator")
	before := allocatorCalls(t, p.allocs[1], "Acquire")
	waitUntil(t, 5*time.Second, func() bool {
		for i, n := range p.nodes {
			n.AllowN(context.Background(), "hot", fmt.Sprintf("fresh-%d", i), 1)
		}
		return allocatorCalls(t, p.allocs[1], "Acquire") > before
	}, "the restored allocator to serve an Acquire")
}

// With every allocator down, nodes fall back as before, and return to
// leases when the allocators do. All but one are ejected: the last one
// keeps the round, since ejecting it would leave no allocator to prefer.
func TestAllAllocatorsDownFallsBack(t *testing.T) {
	p := newPair(t, 2, false)
	ctx := context.Background()
	for _, n := range p.nodes {
		leased(t, n, "hot", "k")
	}
	p.stop(0)
	p.stop(1)
	for i, n := range p.nodes {
		waitUntil(t, 5*time.Second, func() bool {
			d, err := n.AllowN(ctx, "hot", fmt.Sprintf("new-%d", i), 1)
			return err == nil && d.Mode == client.ModeFallback && reachable(t, p.regs[i]) == 0
		}, "a node in fallback")
	}
	e0, e1 := p.ejected(0), p.ejected(1)
	for n := range p.nodes {
		if e0[n]+e1[n] != 1 {
			t.Errorf("node %d ejects %v and %v of the two dead allocators, want one of them", n, e0[n], e1[n])
		}
	}
	p.start(0, p.listen[0])
	p.start(1, p.listen[1])
	for i, n := range p.nodes {
		waitUntil(t, 5*time.Second, func() bool {
			d, err := n.AllowN(ctx, "hot", fmt.Sprintf("back-%d", i), 1)
			return err == nil && d.Mode == client.ModeLease && reachable(t, p.regs[i]) == 1
		}, "a node back on leases")
	}
	for i := range p.allocs {
		waitUntil(t, 10*time.Second, func() bool { return all(p.ejected(i), 0) }, "the allocators restored")
	}
}
