package grpclimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/grpclimit"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// Periods of an hour or a day: no token comes back while a test runs.
// login is strict, decided by the allocator for every call, so its counts
// are exact.
const testRules = `
rules:
  - name: login
    algorithm: sliding_log
    limit: 2
    period: 24h
  - name: hourly
    algorithm: token_bucket
    limit: 3
    period: 1h
  - name: plenty
    algorithm: token_bucket
    limit: 1000000
    period: 24h
`

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startAllocator runs a real allocator on 127.0.0.1 with the memory store
// and returns a client connected to it.
func startAllocator(t testing.TB) *client.Client {
	t.Helper()
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(allocator.Config{Rules: set, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	// A strict rule whose check times out falls back to the node's share;
	// on a loaded machine that would blur the exact counts the tests read.
	c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Logger: quiet(), CheckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// serve runs the gRPC health service on 127.0.0.1:0 behind the
// interceptors and returns a client of it. Check is a unary call, Watch a
// server stream.
func serve(t testing.TB, c *client.Client, opts grpclimit.Options) healthpb.HealthClient {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	lim, err := grpclimit.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary), grpc.ChainStreamInterceptor(lim.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(t testing.TB, h healthpb.HealthClient, md ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// refusal decodes a ResourceExhausted status the way a client would.
func refusal(t testing.TB, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure, *status.Status) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("error %v, want ResourceExhausted", err)
	}
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		default:
			t.Fatalf("unexpected detail %T %v", d, d)
		}
	}
	if qf == nil || len(qf.GetViolations()) != 1 {
		t.Fatalf("QuotaFailure %v, want one violation", qf)
	}
	return ri, qf, st
}

func redacted(key string) string {
	kind, _, _ := strings.Cut(key, ":")
	sum := sha256.Sum256([]byte(key))
	return kind + ":" + hex.EncodeToString(sum[:8])
}

func TestUnaryRefusedWithDetails(t *testing.T) {
	c := startAllocator(t)
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, KeyMetadata: "x-api-key"})
	const secret = "sk-live-0123456789"
	for i := range 2 {
		if err := check(t, h, "x-api-key", secret); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	err := check(t, h, "x-api-key", secret)
	ri, qf, st := refusal(t, err)
	if d := ri.GetRetryDelay().AsDuration(); d < 23*time.Hour || d > 24*time.Hour {
		t.Fatalf("RetryInfo.retry_delay %v, want about a day", d)
	}
	v := qf.GetViolations()[0]
	if want := "login/" + redacted("key:"+secret); v.GetSubject() != want {
		t.Fatalf("subject %q, want %q", v.GetSubject(), want)
	}
	if v.GetQuotaId() != "login" || v.GetQuotaValue() != 2 || v.GetDescription() != "quota of 2 per 24h of rule login exceeded" {
		t.Fatalf("violation %v", v)
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(v.String(), secret) {
		t.Fatalf("the raw key leaked: %v / %v", err, v)
	}
	if !strings.HasPrefix(st.Message(), "rate limit login exceeded; retry in ") {
		t.Fatalf("message %q does not name the rule", st.Message())
	}
	if err := check(t, h, "x-api-key", "another"); err != nil {
		t.Fatalf("another key: %v", err)
	}
}

// Without the metadata entry, calls are keyed by the peer's IP; with it,
// by the key.
func TestPeerAddressFallback(t *testing.T) {
	c := startAllocator(t)
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, KeyMetadata: "x-api-key"})
	for i := range 2 {
		if err := check(t, h); err != nil {
			t.Fatalf("call %d without a key: %v", i+1, err)
		}
	}
	_, qf, _ := refusal(t, check(t, h))
	if want := "login/" + redacted("ip:127.0.0.1"); qf.GetViolations()[0].GetSubject() != want {
		t.Fatalf("subject %q, want %q", qf.GetViolations()[0].GetSubject(), want)
	}
	if err := check(t, h, "x-api-key", "k"); err != nil {
		t.Fatalf("with a key, from the spent address: %v", err)
	}
}

// A stream is charged when it opens; a refused one ends before its
// handler sends anything.
func TestStreamInterceptor(t *testing.T) {
	c := startAllocator(t)
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, KeyMetadata: "x-api-key"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "watcher")
	watch := func() error {
		s, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		resp, err := s.Recv()
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("first message %v", resp)
		}
		return err
	}
	for i := range 2 {
		if err := watch(); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
	}
	err := watch()
	ri, qf, _ := refusal(t, err)
	if ri.GetRetryDelay().AsDuration() < 23*time.Hour || qf.GetViolations()[0].GetQuotaId() != "login" {
		t.Fatalf("stream refusal: %v %v", ri, qf)
	}
}

// With several policies the violation names the rule that refused, and
// gives that rule's limit and period.
//
// "plenty" allows a million a day, yet the SDK may refuse a fresh key for
// a moment while its first lease is small and the next is on its way;
// such refusals must name "plenty", and the loop goes on past them.
func TestMultiRuleNamesTheRefusingRule(t *testing.T) {
	c := startAllocator(t)
	want := map[string]struct {
		quota int64
		desc  string
	}{
		"login":  {2, "quota of 2 per 24h of rule login exceeded"},
		"hourly": {3, "quota of 3 per 1h of rule hourly exceeded"},
		"plenty": {1_000_000, "quota of 1000000 per 24h of rule plenty exceeded"},
	}
	// refusedBy calls until a call is refused by rule; it returns the
	// details and how many calls passed before it.
	refusedBy := func(h healthpb.HealthClient, key, rule string) (*errdetails.RetryInfo, int) {
		t.Helper()
		passed := 0
		for range 1000 {
			err := check(t, h, "x-api-key", key)
			if err == nil {
				passed++
				continue
			}
			ri, qf, _ := refusal(t, err)
			v := qf.GetViolations()[0]
			w, ok := want[v.GetQuotaId()]
			if !ok || v.GetSubject() != v.GetQuotaId()+"/"+redacted("key:"+key) ||
				v.GetQuotaValue() != w.quota || v.GetDescription() != w.desc {
				t.Fatalf("violation %v", v)
			}
			switch v.GetQuotaId() {
			case rule:
				return ri, passed
			case "plenty":
			default:
				t.Fatalf("refused by %q", v.GetQuotaId())
			}
		}
		t.Fatalf("no refusal by %s in 1000 calls", rule)
		return nil, 0
	}
	h := serve(t, c, grpclimit.Options{KeyMetadata: "x-api-key", Policies: []grpclimit.Policy{
		{Rule: "plenty"}, {Rule: "login"}}})
	// login is strict and asked last, only when plenty has passed: its
	// count is exact.
	if _, passed := refusedBy(h, "m", "login"); passed != 2 {
		t.Fatalf("refused by login after %d calls; want after 2", passed)
	}

	h = serve(t, c, grpclimit.Options{KeyMetadata: "x-api-key", Policies: []grpclimit.Policy{
		{Rule: "hourly"}, {Rule: "plenty"}}})
	if ri, _ := refusedBy(h, "burst", "hourly"); ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > time.Hour {
		t.Fatalf("retry_delay %v", ri.GetRetryDelay().AsDuration())
	}
}

// Two rules with the same limit are told apart by the rule the SDK names
// in each decision, not by their limits. The node decides alone here.
func TestEqualQuotasAreToldApart(t *testing.T) {
	c, err := client.New(client.Config{Logger: quiet(), Rules: []client.Rule{
		{Name: "hourly", Algorithm: "token_bucket", Limit: 2, Period: time.Hour},
		{Name: "daily", Algorithm: "token_bucket", Limit: 2, Period: 24 * time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	only := func(rule string) healthpb.HealthClient {
		return serve(t, c, grpclimit.Options{KeyMetadata: "x-api-key", Policies: []grpclimit.Policy{{Rule: rule}}})
	}
	both := serve(t, c, grpclimit.Options{KeyMetadata: "x-api-key",
		Policies: []grpclimit.Policy{{Rule: "hourly"}, {Rule: "daily"}}})
	for _, tc := range []struct{ rule, desc string }{
		{"daily", "quota of 2 per 24h of rule daily exceeded"},
		{"hourly", "quota of 2 per 1h of rule hourly exceeded"},
	} {
		key, alone := "spent-"+tc.rule, only(tc.rule)
		for i := range 2 {
			if err := check(t, alone, "x-api-key", key); err != nil {
				t.Fatalf("%s alone, call %d: %v", tc.rule, i+1, err)
			}
		}
		ri, qf, st := refusal(t, check(t, both, "x-api-key", key))
		v := qf.GetViolations()[0]
		if v.GetQuotaId() != tc.rule || v.GetQuotaValue() != 2 || v.GetDescription() != tc.desc ||
			v.GetSubject() != tc.rule+"/"+redacted("key:"+key) {
			t.Fatalf("%s spent: violation %v", tc.rule, v)
		}
		if !strings.HasPrefix(st.Message(), "rate limit "+tc.rule+" exceeded; retry in ") || ri == nil {
			t.Fatalf("%s spent: message %q, RetryInfo %v", tc.rule, st.Message(), ri)
		}
	}
}

func TestErrorsAndCost(t *testing.T) {
	c := startAllocator(t)
	// A closed client cannot decide: a fault of the limiter, not of the
	// call.
	closed, err := client.New(client.Config{Logger: quiet(),
		Rules: []client.Rule{{Name: "hourly", Algorithm: "token_bucket", Limit: 3, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	policies := []grpclimit.Policy{{Rule: "hourly"}}
	failOpen := serve(t, closed, grpclimit.Options{Policies: policies})
	failClosed := serve(t, closed, grpclimit.Options{Policies: policies, OnError: grpclimit.FailClosed})
	closed.Close()
	if err := check(t, failOpen); err != nil {
		t.Fatalf("a closed client did not fail open: %v", err)
	}
	if err := check(t, failClosed); status.Code(err) != codes.Unavailable {
		t.Fatalf("FailClosed: %v, want Unavailable", err)
	}
	// A key longer than the SDK accepts is hashed and limited, not an error.
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, KeyMetadata: "x-api-key",
		OnError: grpclimit.FailClosed})
	long := strings.Repeat("k", 600)
	for i := range 2 {
		if err := check(t, h, "x-api-key", long); err != nil {
			t.Fatalf("long key, call %d: %v", i+1, err)
		}
	}
	refusal(t, check(t, h, "x-api-key", long))
	// Too costly to ever pass: refused without a RetryInfo.
	h = serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "hourly"}},
		Cost: func(context.Context, string) int64 { return 4 }})
	if ri, _, _ := refusal(t, check(t, h)); ri != nil {
		t.Fatalf("a call that can never pass was told to retry: %v", ri)
	}
	// A cost of 0 is free.
	h = serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, KeyMetadata: "x-api-key",
		Cost: func(_ context.Context, method string) int64 {
			if method == "/grpc.health.v1.Health/Check" {
				return 0
			}
			return 1
		}})
	for range 5 {
		if err := check(t, h, "x-api-key", "free"); err != nil {
			t.Fatalf("a free call: %v", err)
		}
	}
}

// A key that is not UTF-8 (a -bin metadata entry holds any bytes) cannot
// be an Allot key as it is; it is hashed like a long one and limited
// globally like any other. Two nodes share a strict limit of 2: before,
// each node fell back to its own share for such a key, and the two let 4
// calls through.
func TestNonUTF8KeyIsHashed(t *testing.T) {
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(allocator.Config{Rules: set, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	node := func() *client.Client {
		c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Logger: quiet(), CheckTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := node(), node()
	opts := grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, KeyMetadata: "x-api-key-bin"}
	nodes := []healthpb.HealthClient{serve(t, c1, opts), serve(t, c2, opts)}
	passed := 0
	for i := range 6 {
		err := check(t, nodes[i%2], "x-api-key-bin", "bad\xff\xfekey")
		switch status.Code(err) {
		case codes.OK:
			passed++
		case codes.ResourceExhausted:
		default:
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if passed != 2 {
		t.Fatalf("two nodes let %d of 6 calls through with the key bad\\xff\\xfekey, want the limit of 2", passed)
	}
	if err := check(t, nodes[0], "x-api-key-bin", "bad\xff\xfdkey"); err != nil {
		t.Fatalf("another key that is not UTF-8: %v, want its own quota", err)
	}
}

func TestNewChecksOptions(t *testing.T) {
	c := startAllocator(t)
	for name, opts := range map[string]grpclimit.Options{
		"no policies":  {},
		"no rule name": {Policies: []grpclimit.Policy{{Rule: "a"}, {}}},
		"twice":        {Policies: []grpclimit.Policy{{Rule: "a"}, {Rule: "a"}}},
	} {
		if _, err := grpclimit.New(c, opts); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := grpclimit.New(nil, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "a"}}}); err == nil {
		t.Error("New with a nil client succeeded")
	}
	// A client always has rules (client.New fails without): a policy on a
	// rule it does not know is a mistake, told at once.
	_, err := grpclimit.New(c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}, {Rule: "no-such-rule"}}})
	if !errors.Is(err, client.ErrUnknownRule) || !strings.Contains(err.Error(), `Policies[1].Rule: "no-such-rule"`) {
		t.Errorf("a policy on an unknown rule: %v, want ErrUnknownRule naming Policies[1].Rule", err)
	}
	if _, err := grpclimit.New(c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "hourly"}, {Rule: "login"}}}); err != nil {
		t.Errorf("several policies: %v", err)
	}
}

// A rule that a reload removed ends the call with Internal naming it, the
// way the SDK refuses it (ErrUnknownRule): before, every call went through,
// unlimited.
func TestRuleRemovedByReloadIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(name string) {
		t.Helper()
		yaml := "rules:\n  - name: " + name + "\n    algorithm: token_bucket\n    limit: 3\n    period: 1h\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hourly")
	a, err := allocator.New(allocator.Config{RulesFile: path, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "hourly"}}, KeyMetadata: "x-api-key"})
	if err := check(t, h, "x-api-key", "k"); err != nil {
		t.Fatalf("before the reload: %v", err)
	}
	write("renamed")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if _, ok := c.Rule("hourly"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not apply the reloaded rules")
		}
		check(t, h, "x-api-key", fmt.Sprintf("fresh-%d", i))
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		err := check(t, h, "x-api-key", "k")
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), `"hourly"`) {
			t.Fatalf("after the reload: %v, want Internal naming the rule", err)
		}
	}
}
