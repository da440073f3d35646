package envoy_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// t0 is 10 s into a UTC day: every window of a minute, an hour or a day
// began 10 s ago.
var t0 = time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)

// rig is a real allocator on 127.0.0.1 and a go-control-plane client of
// its rate limit service.
type rig struct {
	a   *allocator.Allocator
	rls rlspb.RateLimitServiceClient
	clk *clock.Fake
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// start serves doc on a memory store whose clock the test moves.
func start(t testing.TB, doc string) *rig {
	t.Helper()
	clk := clock.NewFake(t0)
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	r := serve(t, allocator.Config{Rules: parse(t, doc), Store: mem, Clock: clk})
	r.clk = clk
	return r
}

func parse(t testing.TB, doc string) *rules.Set {
	t.Helper()
	set, err := rules.Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// serve runs an allocator with cfg and dials its gRPC port.
func serve(t testing.TB, cfg allocator.Config) *rig {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	a, err := allocator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() {
		a.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &rig{a: a, rls: dial(t, a.Addr())}
}

func dial(t testing.TB, addr string) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// desc is a descriptor of "key=value" entries.
func desc(entries ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// ask sends one ShouldRateLimit and fails the test on an error.
func (r *rig) ask(t testing.TB, domain string, hits uint32, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := r.call(domain, hits, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

func (r *rig) call(domain string, hits uint32, ds ...*ratelimitpb.RateLimitDescriptor) (*rlspb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
}

// status is one descriptor's answer in short: code, limit, remaining.
type status struct {
	code      rlspb.RateLimitResponse_Code
	limit     uint32 // requests_per_unit; 0 without a current_limit
	remaining uint32
}

func statuses(resp *rlspb.RateLimitResponse) []status {
	out := make([]status, len(resp.GetStatuses()))
	for i, s := range resp.GetStatuses() {
		out[i] = status{s.GetCode(), s.GetCurrentLimit().GetRequestsPerUnit(), s.GetLimitRemaining()}
	}
	return out
}

func expect(t testing.TB, what string, resp *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, want ...status) {
	t.Helper()
	got := statuses(resp)
	if resp.GetOverallCode() != overall || len(got) != len(want) {
		t.Fatalf("%s: overall %v, statuses %+v; want %v, %+v", what, resp.GetOverallCode(), got, overall, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: statuses %+v, want %+v", what, got, want)
		}
	}
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// metric sums the samples of a counter whose labels include want.
func metric(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
