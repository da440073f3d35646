package server_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

const testRules = `
rules:
  - name: tb
    algorithm: token_bucket
    limit: 100
    period: 24h
  - name: fw
    algorithm: fixed_window
    limit: 100
    period: 24h
  - name: log
    algorithm: sliding_log
    limit: 5
    period: 1h
`

// serve runs a Server over real gRPC on 127.0.0.1 and returns a client.
func serve(t *testing.T, st store.Store) (allotv1.AllocatorClient, *server.Server) {
	t.Helper()
	return serveWith(t, server.Config{Store: st})
}

// serveWith serves cfg, with the test rules unless it has rules.
func serveWith(t *testing.T, cfg server.Config) (allotv1.AllocatorClient, *server.Server) {
	t.Helper()
	if cfg.Rules == nil {
		set, err := rules.Parse("test", []byte(testRules))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Rules = set
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return allotv1.NewAllocatorClient(conn), srv
}

func memory(t *testing.T) store.Store {
	s := store.NewMemory(clock.Real())
	t.Cleanup(func() { s.Close() })
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantStatus(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	if !strings.Contains(st.Message(), field) {
		t.Fatalf("message %q does not name %q", st.Message(), field)
	}
	if code != codes.InvalidArgument {
		return
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && br.FieldViolations[0].Field == field {
			return
		}
	}
	t.Fatalf("no BadRequest detail naming %q in %v", field, st.Details())
}

func TestBadAcquireRequests(t *testing.T) {
	c, _ := serve(t, memory(t))
	ok := &allotv1.LeaseRequest{Rule: "tb", Key: "k", Want: 1}
	big := make([]*allotv1.LeaseRequest, 100_000)
	for i := range big {
		big[i] = ok
	}
	cases := []struct {
		name  string
		req   *allotv1.AcquireRequest
		code  codes.Code
		field string
	}{
		{"no node", &allotv1.AcquireRequest{Requests: []*allotv1.LeaseRequest{ok}}, codes.InvalidArgument, "node_id"},
		{"no requests", &allotv1.AcquireRequest{NodeId: "n"}, codes.InvalidArgument, "requests"},
		{"100,000 entries", &allotv1.AcquireRequest{NodeId: "n", Requests: big}, codes.InvalidArgument, "requests"},
		{"empty key", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{ok, {Rule: "tb", Want: 1}}}, codes.InvalidArgument, "requests[1].key"},
		{"1 MB key", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: strings.Repeat("k", 1<<20), Want: 1}}}, codes.InvalidArgument, "requests[0].key"},
		{"negative want", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Want: -1}}}, codes.InvalidArgument, "requests[0].want"},
		{"negative consumed", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Consumed: -5}}}, codes.InvalidArgument, "requests[0].consumed"},
		{"huge want", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Want: 1 << 62}}}, codes.InvalidArgument, "requests[0].want"},
		{"negative want_rate", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", WantRate: -1}}}, codes.InvalidArgument, "requests[0].want_rate"},
		{"NaN want_rate", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", WantRate: math.NaN()}}}, codes.InvalidArgument, "requests[0].want_rate"},
		{"infinite want_rate", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", WantRate: math.Inf(1)}}}, codes.InvalidArgument, "requests[0].want_rate"},
		{"negative demand", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Demand: -1}}}, codes.InvalidArgument, "requests[0].demand"},
		{"NaN demand", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Demand: math.NaN()}}}, codes.InvalidArgument, "requests[0].demand"},
		{"infinite demand", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Demand: math.Inf(1)}}}, codes.InvalidArgument, "requests[0].demand"},
		{"negative returned", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Returned: -3}}}, codes.InvalidArgument, "requests[0].returned"},
		{"negative held", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Held: proto.Int64(-1)}}}, codes.InvalidArgument, "requests[0].held"},
		{"unknown rule", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "nope", Key: "k", Want: 1}}}, codes.NotFound, "requests[0].rule"},
		{"malformed rule", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "no pe", Key: "k", Want: 1}}}, codes.InvalidArgument, "requests[0].rule"},
		{"strict rule", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "log", Key: "k", Want: 1}}}, codes.FailedPrecondition, "requests[0].rule"},
		{"duplicate", &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{ok, ok}}, codes.InvalidArgument, "requests[1]"},
		{"long node id", &allotv1.AcquireRequest{NodeId: strings.Repeat("n", 200), Requests: []*allotv1.LeaseRequest{ok}}, codes.InvalidArgument, "node_id"},
		{"negative consumed_age", ageRequest(&durationpb.Duration{Seconds: -1}), codes.InvalidArgument, "requests[0].consumed_age"},
		{"consumed_age nanos above range", ageRequest(&durationpb.Duration{Seconds: 1, Nanos: 1_500_000_000}), codes.InvalidArgument, "requests[0].consumed_age"},
		{"consumed_age nanos below range", ageRequest(&durationpb.Duration{Nanos: -1_000_000_000}), codes.InvalidArgument, "requests[0].consumed_age"},
		{"consumed_age signs differ", ageRequest(&durationpb.Duration{Seconds: 1, Nanos: -5}), codes.InvalidArgument, "requests[0].consumed_age"},
		{"consumed_age past 10,000 years", ageRequest(&durationpb.Duration{Seconds: 315_576_000_001}), codes.InvalidArgument, "requests[0].consumed_age"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Acquire(ctx(t), tc.req)
			wantStatus(t, err, tc.code, tc.field)
		})
	}
	// Nothing of the refused calls was spent: the bucket is still full.
	resp, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "k", Cost: 100})
	if err != nil || !resp.Allowed {
		t.Fatalf("after the bad calls, a cost of 100 = %v, %v; want allowed", resp, err)
	}
}

func ageRequest(age *durationpb.Duration) *allotv1.AcquireRequest {
	return &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Consumed: 1, ConsumedAge: age}}}
}

func TestBadCheckAndReleaseRequests(t *testing.T) {
	c, _ := serve(t, memory(t))
	checks := []struct {
		name  string
		req   *allotv1.CheckRequest
		code  codes.Code
		field string
	}{
		{"unknown rule", &allotv1.CheckRequest{Rule: "nope", Key: "k"}, codes.NotFound, "rule"},
		{"empty key", &allotv1.CheckRequest{Rule: "tb"}, codes.InvalidArgument, "key"},
		{"negative cost", &allotv1.CheckRequest{Rule: "tb", Key: "k", Cost: -1}, codes.InvalidArgument, "cost"},
		{"cost above capacity", &allotv1.CheckRequest{Rule: "tb", Key: "k", Cost: 101}, codes.InvalidArgument, "cost"},
	}
	for _, tc := range checks {
		t.Run("check "+tc.name, func(t *testing.T) {
			_, err := c.Check(ctx(t), tc.req)
			wantStatus(t, err, tc.code, tc.field)
		})
	}
	releases := []struct {
		name  string
		req   *allotv1.ReleaseRequest
		code  codes.Code
		field string
	}{
		{"no node", &allotv1.ReleaseRequest{Returns: []*allotv1.Return{{Rule: "tb", Key: "k", Tokens: 1}}}, codes.InvalidArgument, "node_id"},
		{"negative tokens", &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "tb", Key: "k", Tokens: -1}}}, codes.InvalidArgument, "returns[0].tokens"},
		{"negative held", &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "tb", Key: "k", Tokens: 1, Held: proto.Int64(-1)}}}, codes.InvalidArgument, "returns[0].held"},
		{"unknown rule", &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "x", Key: "k"}}}, codes.NotFound, "returns[0].rule"},
	}
	for _, tc := range releases {
		t.Run("release "+tc.name, func(t *testing.T) {
			_, err := c.Release(ctx(t), tc.req)
			wantStatus(t, err, tc.code, tc.field)
		})
	}
}

func TestAcquireAndCheck(t *testing.T) {
	c, _ := serve(t, memory(t))
	resp, err := c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{
		{Rule: "tb", Key: "a", Want: 40}, {Rule: "fw", Key: "a", Want: 500, Consumed: 10},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tb, fw := resp.Leases[0], resp.Leases[1]
	if tb.Granted != 40 || tb.Remaining != 60 || tb.Holders != 1 || tb.Limit != 100 || tb.Ttl.AsDuration() != 2*time.Second {
		t.Fatalf("token bucket lease %v", tb)
	}
	// want 500 is capped at the rule's lease.max (100), then at what is left.
	if fw.Granted != 90 || fw.Epoch == 0 || fw.Rule != "fw" || fw.Key != "a" {
		t.Fatalf("fixed window lease %v, want 90 granted after 10 consumed", fw)
	}
	if resp.RulesVersion == "" {
		t.Fatal("no rules_version")
	}
	if _, err := c.Release(ctx(t), &allotv1.ReleaseRequest{NodeId: "n1", Returns: []*allotv1.Return{{Rule: "tb", Key: "a", Tokens: 40, Held: proto.Int64(40)}}}); err != nil {
		t.Fatal(err)
	}
	chk, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "a", Cost: 100})
	if err != nil || !chk.Allowed || chk.Remaining != 0 {
		t.Fatalf("check of 100 after the return: %v %v", chk, err)
	}
	chk, err = c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "a"})
	if err != nil || chk.Allowed || chk.RetryAfter.AsDuration() <= 0 {
		t.Fatalf("check on an empty bucket: %v %v", chk, err)
	}
}

// A return without held (a node before the field) credits nothing: the
// allocator cannot tell tokens given back from tokens spent.
func TestReturnWithoutHeldCreditsNothing(t *testing.T) {
	c, _ := serve(t, memory(t))
	if _, err := c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "old", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "a", Want: 40}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "old", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "a", Returned: 20}}})
	if err != nil || resp.Leases[0].Remaining != 60 {
		t.Fatalf("an Acquire returning 20 without held: %v %v, want nothing credited (60 left)", resp, err)
	}
	if _, err := c.Release(ctx(t), &allotv1.ReleaseRequest{NodeId: "old", Returns: []*allotv1.Return{{Rule: "tb", Key: "a", Tokens: 40}}}); err != nil {
		t.Fatal(err)
	}
	if chk, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "a", Cost: 61}); err != nil || chk.Allowed || chk.Remaining != 60 {
		t.Fatalf("after a Release of 40 without held: %v %v, want nothing credited (60 left)", chk, err)
	}
}

func TestConcurrentChecksOverGRPC(t *testing.T) {
	c, _ := serve(t, memory(t))
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "hot"})
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 100 {
		t.Fatalf("%d of 1000 allowed, want exactly 100", got)
	}
}

func TestGetRulesAndReload(t *testing.T) {
	c, srv := serve(t, memory(t))
	resp, err := c.GetRules(ctx(t), &allotv1.GetRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Rules) != 3 || resp.Version != srv.Rules().Version() {
		t.Fatalf("GetRules = %v", resp)
	}
	srv.SetRules(rules.Example())
	if _, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "k"}); status.Code(err) != codes.NotFound {
		t.Fatalf("rule removed by a reload: %v, want NotFound", err)
	}
	if _, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "api-per-key", Key: "k"}); err != nil {
		t.Fatalf("rule added by a reload: %v", err)
	}
}

// failingStore fails every call with err.
type failingStore struct{ err error }

func (s failingStore) Acquire(context.Context, []store.AcquireRequest) ([]store.Lease, error) {
	return nil, s.err
}
func (s failingStore) Release(context.Context, []store.Return) error { return s.err }
func (s failingStore) Check(context.Context, *rules.Rule, string, int64) (store.Decision, error) {
	return store.Decision{}, s.err
}
func (failingStore) Close() error { return nil }

// A store that cannot be reached is Unavailable (retry, elsewhere); a store
// that answers with an error is Internal, and nodes must not take it for an
// outage.
func TestStoreFailures(t *testing.T) {
	c, _ := serve(t, failingStore{fmt.Errorf("%w: connection refused", store.ErrUnavailable)})
	_, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "k"})
	wantStatus(t, err, codes.Unavailable, "store unavailable")
	_, err = c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Want: 1}}})
	wantStatus(t, err, codes.Unavailable, "store unavailable")
	broken, _ := serve(t, failingStore{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")})
	_, err = broken.Check(ctx(t), &allotv1.CheckRequest{Rule: "tb", Key: "k"})
	wantStatus(t, err, codes.Internal, "WRONGTYPE")
}

// A memory store at its key cap refuses a new key with ResourceExhausted
// naming the cap (and, for Acquire, the request), no RetryInfo; the keys it
// holds keep being decided.
func TestStoreFullIsResourceExhausted(t *testing.T) {
	st := store.NewMemoryWith(clock.Real(), store.MemoryOptions{MaxKeys: 2})
	t.Cleanup(func() { st.Close() })
	api, _ := serve(t, st)
	c := ctx(t)
	for _, k := range []string{"a", "b"} {
		if _, err := api.Check(c, &allotv1.CheckRequest{Rule: "tb", Key: k, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := api.Check(c, &allotv1.CheckRequest{Rule: "tb", Key: "c", Cost: 1})
	s := status.Convert(err)
	if s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "the cap is 2") || !strings.Contains(s.Message(), "--memory-max-keys") {
		t.Errorf("Check on a new key: %v", err)
	}
	quota := false
	for _, d := range s.Details() {
		switch d.(type) {
		case *errdetails.QuotaFailure:
			quota = true
		case *errdetails.RetryInfo:
			t.Error("a full store is no rate-limit refusal: no RetryInfo")
		}
	}
	if !quota {
		t.Error("no QuotaFailure detail")
	}
	_, err = api.Acquire(c, &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{
		{Rule: "tb", Key: "a", Want: 1}, {Rule: "tb", Key: "d", Want: 1},
	}})
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.HasPrefix(s.Message(), "requests[1].key: ") {
		t.Errorf("Acquire with a new key: %v", err)
	}
	if d, err := api.Check(c, &allotv1.CheckRequest{Rule: "tb", Key: "b", Cost: 1}); err != nil || !d.GetAllowed() {
		t.Errorf("Check on a key held: %v, %v", d, err)
	}
}
