package allocator_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// start runs an allocator on 127.0.0.1 and returns a client of it.
func start(t testing.TB, cfg allocator.Config) (*allocator.Allocator, *grpc.ClientConn) {
	t.Helper()
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
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return a, conn
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// uniqueRules names rules for this test so that tests sharing one Redis
// never meet.
func uniqueRules(t *testing.T, doc string) *rules.Set {
	t.Helper()
	prefix := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()) + "-"
	prefix = prefix[max(0, len(prefix)-40):]
	prefix = strings.TrimLeft(prefix, "-")
	set, err := rules.Parse("test", []byte(strings.ReplaceAll(doc, "name: ", "name: "+prefix)))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func name(set *rules.Set, i int) string { return set.Rules()[i].Name }

const exactRules = `
rules:
  - name: tb
    algorithm: token_bucket
    limit: 100
    period: 24h
  - name: fw
    algorithm: fixed_window
    limit: 100
    period: 24h
`

// 1,000 concurrent Check calls through real gRPC against a limit of 100 on
// a real Redis allow exactly 100; concurrent Acquires never grant more than
// the bucket holds.
func TestExactCountingOnRedis(t *testing.T) {
	set := uniqueRules(t, exactRules)
	// No bound on calls in flight: this is about the store's atomicity, not
	// about shedding (shed_test.go).
	_, conn := start(t, allocator.Config{Rules: set, RedisURL: redistest.URL(t), StoreTimeout: 2 * time.Second, MaxInFlight: -1})
	api := allotv1.NewAllocatorClient(conn)
	for _, rule := range []string{name(set, 0), name(set, 1)} {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: rule, Key: "hot"})
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
			t.Fatalf("%s: %d of 1000 concurrent checks allowed, want exactly 100", rule, got)
		}
	}
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n" + string(rune('a'+i%20)),
				Requests: []*allotv1.LeaseRequest{{Rule: name(set, 0), Key: "leased", Want: 9}}})
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(resp.Leases[0].Granted)
		}()
	}
	wg.Wait()
	if got := granted.Load(); got > 100 {
		t.Fatalf("concurrent Acquires granted %d from a bucket of 100", got)
	}
}

// A dead Redis costs milliseconds: Unavailable within 100ms, and the
// allocator recovers by itself when Redis is back.
func TestRedisKilledAndRestored(t *testing.T) {
	srv := redistest.Start(t)
	set := uniqueRules(t, exactRules)
	_, conn := start(t, allocator.Config{Rules: set, RedisURL: srv.URL(), StoreTimeout: 50 * time.Millisecond})
	api := allotv1.NewAllocatorClient(conn)
	check := func() (*allotv1.CheckResponse, time.Duration, error) {
		begin := time.Now()
		resp, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: name(set, 0), Key: "k"})
		return resp, time.Since(begin), err
	}
	if _, _, err := check(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for i := range 5 {
		_, took, err := check()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d with Redis dead: %v, want Unavailable", i, err)
		}
		if took > 100*time.Millisecond {
			t.Fatalf("call %d with Redis dead took %v, want < 100ms", i, took)
		}
	}
	srv.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _, err := check()
		if err == nil {
			// A restarted Redis is empty: a fresh bucket of 100, less this one.
			if !resp.Allowed || resp.Remaining != 99 {
				t.Fatalf("after recovery: %v", resp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 5s of Redis coming back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// What grpcurl list shows: the Allocator, health and reflection.
func TestReflectionAndHealth(t *testing.T) {
	_, conn := start(t, allocator.Config{})
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), "allot.v1.Allocator") {
		t.Fatalf("reflection lists %v, want allot.v1.Allocator", names)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx(t), &healthpb.HealthCheckRequest{Service: "allot.v1.Allocator"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	// The built-in rules are served when no file is given.
	rs, err := allotv1.NewAllocatorClient(conn).GetRules(ctx(t), &allotv1.GetRulesRequest{})
	if err != nil || len(rs.Rules) != rules.Example().Len() {
		t.Fatalf("GetRules: %v %v", rs, err)
	}
}

// An invalid new rules file keeps the old rule set; a valid one replaces it.
func TestReloadKeepsOldRulesOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(exactRules)
	a, conn := start(t, allocator.Config{RulesFile: path})
	api := allotv1.NewAllocatorClient(conn)
	v1 := a.Rules().Version()

	write("rules:\n  - name: tb\n    algorithm: token_bucket\n    limit: -3\n    period: 1s\n")
	err := a.Reload()
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:4: rule \"tb\": field limit") {
		t.Fatalf("Reload of a bad file: %v", err)
	}
	if a.Rules().Version() != v1 {
		t.Fatal("a bad file replaced the rules")
	}
	if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: "fw", Key: "k"}); err != nil {
		t.Fatalf("old rule after a failed reload: %v", err)
	}

	write("rules:\n  - name: only\n    algorithm: fixed_window\n    limit: 3\n    period: 1s\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: "fw", Key: "k"}); status.Code(err) != codes.NotFound {
		t.Fatalf("removed rule: %v, want NotFound", err)
	}
	if _, err := api.Check(ctx(t), &allotv1.CheckRequest{Rule: "only", Key: "k"}); err != nil {
		t.Fatalf("new rule: %v", err)
	}
}

func TestShutdownDrains(t *testing.T) {
	a, err := allocator.New(allocator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := allotv1.NewAllocatorClient(conn).GetRules(ctx(t), &allotv1.GetRulesRequest{}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}
