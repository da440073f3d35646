package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
)

// stub is an allocator's gRPC face on 127.0.0.1: it answers every call
// at once, or, hung, never (until the caller gives up), and keeps what it
// was sent.
type stub struct {
	allotv1.UnimplementedAllocatorServer
	addr   string
	health *health.Server
	probes chan struct{} // one per health check answered

	mu       sync.Mutex
	hung     bool
	refusal  error // every Check's answer, when set
	acquires []*allotv1.AcquireRequest
	releases []*allotv1.ReleaseRequest
}

func serveStub(t *testing.T, hung bool) *stub {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stub{addr: lis.Addr().String(), health: health.NewServer(), probes: make(chan struct{}, 64), hung: hung}
	s.health.SetServingStatus(healthService, healthpb.HealthCheckResponse_SERVING)
	srv := grpc.NewServer()
	allotv1.RegisterAllocatorServer(srv, s)
	healthpb.RegisterHealthServer(srv, countedHealth{s.health, s.probes})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

// countedHealth is a health server that reports each check it answers.
type countedHealth struct {
	*health.Server
	checked chan<- struct{}
}

func (h countedHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	defer func() { h.checked <- struct{}{} }()
	return h.Server.Check(ctx, req)
}

// answer waits while hung, until the caller gives up.
func (s *stub) answer(ctx context.Context) error {
	s.mu.Lock()
	hung := s.hung
	s.mu.Unlock()
	if hung {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

func (s *stub) Acquire(ctx context.Context, req *allotv1.AcquireRequest) (*allotv1.AcquireResponse, error) {
	s.mu.Lock()
	s.acquires = append(s.acquires, req)
	s.mu.Unlock()
	if err := s.answer(ctx); err != nil {
		return nil, err
	}
	return &allotv1.AcquireResponse{Leases: make([]*allotv1.Lease, len(req.GetRequests()))}, nil
}

func (s *stub) Release(ctx context.Context, req *allotv1.ReleaseRequest) (*allotv1.ReleaseResponse, error) {
	s.mu.Lock()
	s.releases = append(s.releases, req)
	s.mu.Unlock()
	return &allotv1.ReleaseResponse{}, s.answer(ctx)
}

func (s *stub) Check(ctx context.Context, req *allotv1.CheckRequest) (*allotv1.CheckResponse, error) {
	s.mu.Lock()
	refusal := s.refusal
	s.mu.Unlock()
	if refusal != nil {
		return nil, refusal
	}
	return &allotv1.CheckResponse{Allowed: true}, s.answer(ctx)
}

func (s *stub) sent() (acquires []*allotv1.AcquireRequest, releases []*allotv1.ReleaseRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquires, s.releases
}

// newTestAllocators dials addrs in that order; the first call starts at
// the second of them (the round-robin counter starts at 1).
func newTestAllocators(t *testing.T, clk clock.Clock, patience time.Duration, addrs ...string) *Conns {
	t.Helper()
	p := New([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, clk,
		slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Duration { return time.Second }, patience)
	t.Cleanup(func() { p.Close() })
	if err := p.Set(addrs); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *Conns) byAddr(addr string) *endpoint {
	for _, a := range *p.list.Load() {
		if a.addr == addr {
			return a
		}
	}
	return nil
}

// An Acquire that the first allocator never answers is answered by the
// second within the caller's deadline: the first attempt had half of it.
// The retry leaves out the tokens the request returned, which the hung
// allocator may have credited; the round trip is the answering attempt's.
func TestHungAttemptLeavesHalfTheDeadlineToTheNext(t *testing.T) {
	good, hung := serveStub(t, false), serveStub(t, true)
	p := newTestAllocators(t, clock.Real(), 10*time.Millisecond, good.addr, hung.addr)
	api := allotv1.NewAllocatorClient(p)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	var from Answer
	start := time.Now()
	_, err := api.Acquire(ctx, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{
		{Rule: "r", Key: "k", Want: 10, Consumed: 3, Returned: 5, ReturnedEpoch: 2}}}, &from)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Acquire with one allocator of two hung: %v", err)
	}
	t.Logf("answered by the second allocator after %v; its attempt took %v", took, from.Took)
	if took < 190*time.Millisecond || took >= 400*time.Millisecond {
		t.Errorf("took %v, want the hung attempt's half of 400ms, then the answer", took)
	}
	if from.Addr != good.addr || from.Took >= 190*time.Millisecond {
		t.Errorf("answer from %s in %v, want %s and the answering attempt's time only", from.Addr, from.Took, good.addr)
	}
	if a := p.byAddr(hung.addr); !a.sick.Load() {
		t.Error("the hung allocator is not ejected")
	}
	hungGot, _ := hung.sent()
	goodGot, _ := good.sent()
	if len(hungGot) != 1 || len(goodGot) != 1 {
		t.Fatalf("acquires: hung %d, good %d, want one each", len(hungGot), len(goodGot))
	}
	if r := goodGot[0].GetRequests()[0]; r.GetReturned() != 0 || r.GetConsumed() != 3 || r.GetWant() != 10 {
		t.Errorf("the retry carried %+v: want the consumption again and no returned tokens", r)
	}
	// Ejected, the hung allocator gets no more calls while the other answers.
	for range 4 {
		if _, err := api.Check(ctx, &allotv1.CheckRequest{Rule: "r", Key: "k", Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took >= 300*time.Millisecond {
		t.Errorf("four Checks after the ejection took until %v", took)
	}
}

// A Release that may have been applied is not sent again: a second one
// would credit the tokens twice. One that never left the node is.
func TestReleaseGoesAgainOnlyWhenNeverSent(t *testing.T) {
	good, hung := serveStub(t, false), serveStub(t, true)
	p := newTestAllocators(t, clock.Real(), 10*time.Millisecond, good.addr, hung.addr)
	api := allotv1.NewAllocatorClient(p)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	rel := &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "r", Key: "k", Tokens: 7}}}
	if _, err := api.Release(ctx, rel); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Release through a hung allocator: %v, want DeadlineExceeded", err)
	}
	if _, rels := good.sent(); len(rels) != 0 {
		t.Fatalf("the Release went again to the other allocator (%d)", len(rels))
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	p = newTestAllocators(t, clock.Real(), 10*time.Millisecond, good.addr, dead)
	api = allotv1.NewAllocatorClient(p)
	if _, err := api.Release(ctx, rel); err != nil {
		t.Fatalf("Release with one allocator refusing connections: %v", err)
	}
	if _, rels := good.sent(); len(rels) != 1 {
		t.Fatalf("the other allocator got %d Releases, want the one the dead allocator never saw", len(rels))
	}
}

// A caller whose own deadline is about to end does not get an allocator
// ejected: too short an attempt says nothing of it.
func TestShortCallerDeadlineEjectsNothing(t *testing.T) {
	good, hung := serveStub(t, false), serveStub(t, true)
	p := newTestAllocators(t, clock.Real(), 50*time.Millisecond, good.addr, hung.addr)
	api := allotv1.NewAllocatorClient(p)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer cancel()
	if _, err := api.Check(ctx, &allotv1.CheckRequest{Rule: "r", Key: "k", Cost: 1}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if p.byAddr(hung.addr).sick.Load() {
		t.Fatal("a 20ms attempt ejected the allocator")
	}
}

// A refusal from the allocator a call failed over to is returned as it
// was worded, not folded into a summary of the attempts.
func TestRefusalAfterFailoverKeepsItsWords(t *testing.T) {
	good, hung := serveStub(t, false), serveStub(t, true)
	good.mu.Lock()
	good.refusal = status.Error(codes.InvalidArgument, "requests[3].key: is 600 bytes, at most 512")
	good.mu.Unlock()
	p := newTestAllocators(t, clock.Real(), 10*time.Millisecond, good.addr, hung.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := allotv1.NewAllocatorClient(p).Check(ctx, &allotv1.CheckRequest{Rule: "r", Key: "k", Cost: 1})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "requests[3].key: is 600 bytes, at most 512" {
		t.Fatalf("Check = %v, want the refusal as the allocator worded it", err)
	}
	if !p.byAddr(hung.addr).sick.Load() {
		t.Fatal("the hung allocator is not ejected")
	}
}

// The last allocator in the round is never ejected: with all failing, the
// node has no better one to prefer.
func TestLastHealthyAllocatorStays(t *testing.T) {
	a, b := serveStub(t, true), serveStub(t, true)
	p := newTestAllocators(t, clock.Real(), 10*time.Millisecond, a.addr, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := allotv1.NewAllocatorClient(p).Check(ctx, &allotv1.CheckRequest{Rule: "r", Key: "k", Cost: 1})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Check with both hung: %v", err)
	}
	if sa, sb := p.byAddr(a.addr).sick.Load(), p.byAddr(b.addr).sick.Load(); sa == sb {
		t.Fatalf("ejected: %v and %v, want exactly one", sa, sb)
	}
}

// An ejected allocator is probed at 250ms, then twice as long each time up
// to 2s (each ±20%), and restored by the first probe it answers SERVING;
// the metric follows.
func TestProbesBackOffUntilServing(t *testing.T) {
	sick, other := serveStub(t, false), serveStub(t, false)
	sick.health.SetServingStatus(healthService, healthpb.HealthCheckResponse_NOT_SERVING)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	p := newTestAllocators(t, clk, 10*time.Millisecond, sick.addr, other.addr)
	reg := prometheus.NewRegistry()
	ejected := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_client_allocator_ejected"}, []string{"allocator"})
	ejections := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_client_allocator_ejections_total"}, []string{"allocator"})
	reg.MustRegister(ejected, ejections)
	p.SetMetrics(ejected, ejections)
	value := func(metric string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, x := range mf.GetMetric() {
				if mf.GetName() == metric && x.GetLabel()[0].GetValue() == sick.addr {
					return x.GetGauge().GetValue() + x.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no %s for %s", metric, sick.addr)
		return 0
	}
	a := p.byAddr(sick.addr)
	p.eject(a, errors.New("test"))
	if v := value("allot_client_allocator_ejected"); v != 1 {
		t.Fatalf("ejected gauge %v, want 1", v)
	}
	for _, wait := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second} {
		probeAfter(t, clk, sick, wait)
		if !a.sick.Load() {
			t.Fatal("restored by a NOT_SERVING probe")
		}
	}
	sick.health.SetServingStatus(healthService, healthpb.HealthCheckResponse_SERVING)
	probeAfter(t, clk, sick, 2*time.Second)
	restored(t, a)
	if v := value("allot_client_allocator_ejected"); v != 0 {
		t.Fatalf("ejected gauge %v after the restore, want 0", v)
	}
	if v := value("allot_client_allocator_ejections_total"); v != 1 {
		t.Fatalf("ejections %v, want 1", v)
	}
	if clk.Timers() != 0 {
		t.Fatal("the probe loop goes on after the restore")
	}
}

// probeAfter checks that the next probe of s comes wait ±20% from now.
func probeAfter(t *testing.T, clk *clock.Fake, s *stub, wait time.Duration) {
	t.Helper()
	if !clk.WaitTimers(1, 5*time.Second) {
		t.Fatal("no probe timer armed")
	}
	clk.Advance(wait * 79 / 100)
	if clk.Timers() != 1 {
		t.Fatalf("probed before %v", wait*8/10)
	}
	clk.Advance(wait * 42 / 100)
	select {
	case <-s.probes:
	case <-time.After(5 * time.Second):
		t.Fatalf("no probe by %v", wait*12/10)
	}
}

// restored waits for the probe loop to act on the answer it got.
func restored(t *testing.T, a *endpoint) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); a.sick.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("not restored after a SERVING probe")
		}
		time.Sleep(time.Millisecond)
	}
}

// An allocator ejected again soon after its return answers probes but not
// calls: its probes wait longer each time rather than bring it back in
// 250ms to fail the next call; after a quiet spell they start afresh.
func TestRelapseResumesTheBackoff(t *testing.T) {
	s, other := serveStub(t, false), serveStub(t, false)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	p := newTestAllocators(t, clk, 10*time.Millisecond, s.addr, other.addr)
	a := p.byAddr(s.addr)
	for _, wait := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second} {
		p.eject(a, errors.New("test"))
		probeAfter(t, clk, s, wait)
		restored(t, a)
		clk.Advance(10 * time.Second)
	}
	clk.Advance(relapseWithin)
	p.eject(a, errors.New("test"))
	probeAfter(t, clk, s, 250*time.Millisecond)
	restored(t, a)
}
