package allocator_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
)

func grpcHealth(t *testing.T, conn *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	var st healthpb.HealthCheckResponse_ServingStatus
	for _, svc := range []string{"", "allot.v1.Allocator"} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		if svc != "" && h.Status != st {
			t.Fatalf("health of %q is %v, of the server %v", svc, h.Status, st)
		}
		st = h.Status
	}
	return st
}

func healthz(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// tick moves the fake clock past one store probe and waits until the probe
// loop has run and re-armed its timer.
func tick(t *testing.T, clk *clock.Fake) {
	t.Helper()
	if !clk.WaitTimers(1, 5*time.Second) {
		t.Fatal("the probe loop never armed its timer")
	}
	clk.Advance(time.Second)
	if !clk.WaitTimers(1, 5*time.Second) {
		t.Fatal("the probe loop did not come back")
	}
}

// gRPC health and /healthz follow the store: NOT_SERVING and 503 with the
// reason while Redis is down, SERVING and 200 once it is back.
func TestHealthFollowsTheStore(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	a, conn := start(t, allocator.Config{Rules: uniqueRules(t, exactRules), RedisURL: srv.URL(), MetricsListen: "127.0.0.1:0",
		StoreTimeout: 100 * time.Millisecond, Clock: clk})
	url := "http://" + a.MetricsAddr() + "/healthz"
	if st := grpcHealth(t, conn); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health with Redis up: %v", st)
	}
	if c, body := healthz(t, http.DefaultClient, url); c != 200 || body != "ok" {
		t.Fatalf("/healthz with Redis up: %d %q", c, body)
	}

	srv.Kill()
	tick(t, clk)
	if st := grpcHealth(t, conn); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health with Redis down: %v, want NOT_SERVING", st)
	}
	if c, body := healthz(t, http.DefaultClient, url); c != 503 || !strings.Contains(body, "store unavailable") {
		t.Fatalf("/healthz with Redis down: %d %q, want 503 with the reason", c, body)
	}

	srv.Restart(t)
	tick(t, clk)
	if st := grpcHealth(t, conn); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health with Redis back: %v", st)
	}
	if c, _ := healthz(t, http.DefaultClient, url); c != 200 {
		t.Fatalf("/healthz with Redis back: %d", c)
	}
}

// A Redis that comes back asking for a password (here: set live, with the
// connections dropped) is an outage of the allocator: calls answer
// Unavailable, which nodes take as "allocator unreachable" (open rules fall
// back, closed rules deny), not Internal, which they would take as a
// rejected request. Health says NOT_SERVING and why.
func TestRedisAskingForAuthIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	set := uniqueRules(t, exactRules)
	a, conn := start(t, allocator.Config{Rules: set, RedisURL: srv.URL(), MetricsListen: "127.0.0.1:0", Clock: clk})
	api := allotv1.NewAllocatorClient(conn)
	req := &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{{Rule: name(set, 0), Key: "k", Want: 1}}}
	if _, err := api.Acquire(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.ConfigSet(ctx(t), "requirepass", "now-locked-0123").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx(t), "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := api.Acquire(ctx(t), req)
	if code(err) != codes.Unavailable || !strings.Contains(err.Error(), "refuses the allocator's credentials") {
		t.Fatalf("Acquire against a Redis that wants a password: %v, want Unavailable: credentials refused", err)
	}
	if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: name(set, 1), Key: "k"}); code(err) != codes.Unavailable {
		t.Fatalf("Check: %v, want Unavailable", err)
	}
	tick(t, clk)
	if st := grpcHealth(t, conn); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health: %v, want NOT_SERVING", st)
	}
	if c, body := healthz(t, http.DefaultClient, "http://"+a.MetricsAddr()+"/healthz"); c != 503 || !strings.Contains(body, "NOAUTH") {
		t.Fatalf("/healthz: %d %q", c, body)
	}
}

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// records parses the JSON log lines; any other line fails the test.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("an unstructured log line: %q", line)
		}
		out = append(out, r)
	}
	return out
}

func count(recs []map[string]any, msg string) (n int, last map[string]any) {
	for _, r := range recs {
		if r["msg"] == msg {
			n, last = n+1, r
		}
	}
	return n, last
}

// An outage of many calls logs a few lines, not one per call; go-redis's
// own lines come through slog, structured and limited too; the next line
// after a quiet interval says how many were dropped.
func TestOutageLogsAreRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	set := uniqueRules(t, exactRules)
	_, conn := start(t, allocator.Config{Rules: set, RedisURL: srv.URL(), Clock: clk,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	api := allotv1.NewAllocatorClient(conn)
	srv.Kill()
	const calls = 200
	for range calls {
		if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: name(set, 0), Key: "k"}); code(err) != codes.Unavailable {
			t.Fatalf("Check with Redis down: %v", err)
		}
	}
	recs := logs.records(t)
	failed, _ := count(recs, "store call failed")
	redisLines, last := count(recs, "go-redis")
	t.Logf("%d calls failed: %d store-failure lines, %d go-redis lines, %d lines in all", calls, failed, redisLines, len(recs))
	if failed < 1 || failed > 3 {
		t.Fatalf("%d store-failure lines for %d failed calls, want the burst of at most 3", failed, calls)
	}
	if redisLines < 1 || redisLines > 3 || last["component"] != "go-redis" || !strings.Contains(last["detail"].(string), "dial") {
		t.Fatalf("%d go-redis lines (want 1 to 3, structured), last %v", redisLines, last)
	}
	clk.Advance(10 * time.Second)
	if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: name(set, 0), Key: "k"}); code(err) != codes.Unavailable {
		t.Fatal(err)
	}
	n, rec := count(logs.records(t), "store call failed")
	if n != failed+1 || rec["dropped"] != float64(calls-failed) {
		t.Fatalf("after 10s: %d lines, last %v; want one more with dropped=%d", n, rec, calls-failed)
	}
}

// /metrics and /healthz over mTLS: a client certificate from the fleet CA
// is needed, plaintext is refused.
func TestMetricsOverMTLS(t *testing.T) {
	p := newPKI(t)
	a := serve(t, allocator.Config{MetricsListen: "127.0.0.1:0", MetricsTLS: allocator.MetricsMTLS,
		TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile}})
	client := func(cert *certstest.Leaf) *http.Client {
		cfg := &tls.Config{RootCAs: p.ca.Pool()}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.TLS(t)}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	}
	url := "https://" + a.MetricsAddr() + "/healthz"
	if c, body := healthz(t, client(p.ca.Issue(t, certstest.Names{CN: "prometheus"})), url); c != 200 || body != "ok" {
		t.Fatalf("with a fleet certificate: %d %q", c, body)
	}
	if _, err := client(nil).Get(url); err == nil {
		t.Fatal("no client certificate, and /healthz answered")
	}
	if _, err := client(p.rogue.Issue(t, certstest.Names{CN: "x"})).Get(url); err == nil {
		t.Fatal("a rogue certificate, and /healthz answered")
	}
	resp, err := http.Get("http://" + a.MetricsAddr() + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plaintext /healthz answered 200 on a TLS listener")
		}
	}
}
