package allocator_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// heldStore is the memory store with each call held: until release is
// closed (gate), or for a fixed time (a store round trip). It records the
// most calls it ever had at once.
type heldStore struct {
	store.Store
	gate    chan struct{}
	hold    time.Duration
	now     atomic.Int64
	peak    atomic.Int64
	entered chan struct{}
}

func newHeldStore() *heldStore {
	return &heldStore{Store: store.NewMemory(clock.Real()), entered: make(chan struct{}, 1024)}
}

func (h *heldStore) enter(ctx context.Context) {
	n := h.now.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	select {
	case h.entered <- struct{}{}:
	default:
	}
	if h.gate != nil {
		select {
		case <-h.gate:
		case <-ctx.Done():
		}
	}
	if h.hold > 0 {
		time.Sleep(h.hold) // stands for the store's round trip
	}
}

func (h *heldStore) Acquire(ctx context.Context, reqs []store.AcquireRequest) ([]store.Lease, error) {
	h.enter(ctx)
	defer h.now.Add(-1)
	return h.Store.Acquire(ctx, reqs)
}

func (h *heldStore) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (store.Decision, error) {
	h.enter(ctx)
	defer h.now.Add(-1)
	return h.Store.Check(ctx, r, key, cost)
}

func acquireReq(node string) *allotv1.AcquireRequest {
	return &allotv1.AcquireRequest{NodeId: node, Requests: []*allotv1.LeaseRequest{{Rule: "api-per-key", Key: node, Want: 1}}}
}

// With the bounds full, a call is refused at once with ResourceExhausted:
// a node over its own bound while other nodes are still served, and
// everyone once the allocator's bound is full. Nothing waits in a queue.
func TestShedWhenBoundsAreFull(t *testing.T) {
	h := newHeldStore()
	h.gate = make(chan struct{})
	_, conn := start(t, allocator.Config{Store: h, StoreTimeout: 10 * time.Second, MaxInFlight: 4, MaxInFlightPerNode: 2})
	api := allotv1.NewAllocatorClient(conn)
	ctx := ctx(t)

	var held sync.WaitGroup
	hold := func(node string) {
		held.Add(1)
		go func() {
			defer held.Done()
			if _, err := api.Acquire(ctx, acquireReq(node)); err != nil {
				t.Errorf("a held call of %s: %v", node, err)
			}
		}()
		<-h.entered
	}
	hold("greedy")
	hold("greedy")
	begin := time.Now()
	_, err := api.Acquire(ctx, acquireReq("greedy"))
	t.Logf("node bound: refused in %v: %v", time.Since(begin), err)
	if code(err) != codes.ResourceExhausted {
		t.Fatalf("a third call from a node with 2 in flight: %v, want ResourceExhausted", err)
	}
	hold("a")
	hold("b") // the allocator's 4 slots are taken
	for _, node := range []string{"c", ""} {
		begin = time.Now()
		_, err = api.Acquire(ctx, acquireReq(node))
		t.Logf("fleet bound: refused in %v: %v", time.Since(begin), err)
		if code(err) != codes.ResourceExhausted {
			t.Fatalf("a call with every slot taken: %v, want ResourceExhausted", err)
		}
	}
	if _, err := api.Check(ctx, &allotv1.CheckRequest{Rule: "login-attempts", Key: "k"}); code(err) != codes.ResourceExhausted {
		t.Fatalf("Check with every slot taken: %v, want ResourceExhausted", err)
	}
	if _, err := api.GetRules(ctx, &allotv1.GetRulesRequest{}); err != nil {
		t.Fatalf("GetRules does not touch the store and is never shed: %v", err)
	}
	close(h.gate)
	held.Wait()
	if _, err := api.Acquire(ctx, acquireReq("greedy")); err != nil {
		t.Fatalf("after the held calls finished: %v", err)
	}
	if p := h.peak.Load(); p != 4 {
		t.Fatalf("the store saw %d calls at once, want the bound, 4", p)
	}
}

// One node floods Acquire at ten times the rate of the well-behaved fleet,
// against a store that takes 5ms a call. The flood is shed (each shed call
// answered ResourceExhausted), the store never sees more calls than the
// bound, and every call of the well-behaved nodes is served. Latencies are
// logged, not asserted: they depend on the machine.
func TestAcquireFloodIsShedAndOthersServed(t *testing.T) {
	h := newHeldStore()
	h.hold = 5 * time.Millisecond
	const maxInFlight, perNode = 8, 2
	_, conn := start(t, allocator.Config{Store: h, StoreTimeout: 5 * time.Second, MaxInFlight: maxInFlight, MaxInFlightPerNode: perNode})
	api := allotv1.NewAllocatorClient(conn)

	const (
		nodes     = 4
		perNodeHz = 25                     // each well-behaved node's Acquire rate
		floodHz   = 10 * nodes * perNodeHz // ten times the fleet's rate
		run       = 2 * time.Second
	)
	type sample struct {
		took time.Duration
		err  error
	}
	drive := func(node string, hz int, d time.Duration, sequential bool) []sample {
		var (
			mu  sync.Mutex
			out []sample
			wg  sync.WaitGroup
		)
		call := func() {
			defer wg.Done()
			begin := time.Now()
			_, err := api.Acquire(ctx(t), acquireReq(node))
			mu.Lock()
			out = append(out, sample{time.Since(begin), err})
			mu.Unlock()
		}
		tick := time.NewTicker(time.Second / time.Duration(hz))
		defer tick.Stop()
		for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
			wg.Add(1)
			if sequential {
				call()
			} else {
				go call() // open loop: the flood does not wait for answers
			}
		}
		wg.Wait()
		return out
	}
	quantiles := func(s []sample) string {
		if len(s) == 0 {
			return "none"
		}
		d := make([]time.Duration, len(s))
		for i := range s {
			d[i] = s[i].took
		}
		slices.Sort(d)
		q := func(f float64) time.Duration { return d[int(f*float64(len(d)-1))].Round(time.Microsecond) }
		return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(d), q(0.5), q(0.99), d[len(d)-1].Round(time.Microsecond))
	}

	baseline := drive("calm", perNodeHz, run/4, true)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		calm  []sample
		flood []sample
	)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := drive(fmt.Sprintf("node-%d", i), perNodeHz, run, true)
			mu.Lock()
			calm = append(calm, s...)
			mu.Unlock()
		}()
	}
	flood = drive("flood", floodHz, run, false)
	wg.Wait()

	var served, shed []sample
	for _, s := range flood {
		switch code(s.err) {
		case codes.OK:
			served = append(served, s)
		case codes.ResourceExhausted:
			shed = append(shed, s)
		default:
			t.Fatalf("a flood call ended %v: want served or ResourceExhausted", s.err)
		}
	}
	for _, s := range append(baseline, calm...) {
		if s.err != nil {
			t.Fatalf("a well-behaved node's call failed during the flood: %v", s.err)
		}
	}
	if len(shed) == 0 {
		t.Fatalf("none of %d flood calls was shed: the flood never filled the node's bound of %d", len(flood), perNode)
	}
	if p := h.peak.Load(); p > maxInFlight {
		t.Fatalf("the store saw %d calls at once, over the bound of %d", p, maxInFlight)
	}
	t.Logf("well-behaved, no flood:   %s", quantiles(baseline))
	t.Logf("well-behaved, with flood: %s", quantiles(calm))
	t.Logf("flood served:             %s", quantiles(served))
	t.Logf("flood shed:               %s", quantiles(shed))
	t.Logf("store peak concurrency %d (bound %d); flood offered %d calls in %v", h.peak.Load(), maxInFlight, len(flood), run)
}
