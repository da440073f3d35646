package envoy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/store"
)

func section(rpu string) string {
	return `
rules:
  - name: api
    algorithm: token_bucket
    limit: 10
    period: 1s
envoy:
  domains:
    - domain: d
      descriptors:
        - key: k
          rate_limit: { unit: day, requests_per_unit: ` + rpu + ` }
`
}

// Reload reads the envoy section with the rules: the new limit applies to
// the next request, a limit whose unit is the same keeps its count, and a
// file that does not parse keeps the current section.
func TestReloadAppliesTheEnvoySection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(section("1"))
	mem := store.NewMemory(clock.NewFake(t0))
	defer mem.Close()
	r := serve(t, allocator.Config{RulesFile: path, Store: mem})
	k := desc("k=v")
	expect(t, "limit 1", r.ask(t, "d", 0, k), ok, status{ok, 1, 0})
	expect(t, "limit 1, spent", r.ask(t, "d", 0, k), over, status{over, 1, 0})

	write(section("3"))
	if err := r.a.Reload(); err != nil {
		t.Fatal(err)
	}
	expect(t, "limit 3, one spent before", r.ask(t, "d", 0, k), ok, status{ok, 3, 1})

	write(section("three"))
	if err := r.a.Reload(); err == nil || !strings.Contains(err.Error(), "envoy.domains[0].descriptors[0].rate_limit.requests_per_unit") {
		t.Fatalf("reload of a bad section: %v", err)
	}
	expect(t, "the section kept", r.ask(t, "d", 0, k), ok, status{ok, 3, 0})

	write("rules:\n  - name: api\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n")
	if err := r.a.Reload(); err != nil {
		t.Fatal(err)
	}
	expect(t, "section removed: nothing limited", r.ask(t, "d", 0, k), ok, status{ok, 0, 0})
}

// With EnvoyListen the service has a port of its own, serving it and
// health checks only; the main port serves it too.
func TestEnvoyPort(t *testing.T) {
	mem := store.NewMemory(clock.NewFake(t0))
	defer mem.Close()
	r := serve(t, allocator.Config{Rules: parse(t, section("5")), Store: mem, EnvoyListen: "127.0.0.1:0"})
	if r.a.EnvoyAddr() == "" || r.a.EnvoyAddr() == r.a.Addr() {
		t.Fatalf("envoy port %q beside %q", r.a.EnvoyAddr(), r.a.Addr())
	}
	own := &rig{rls: dial(t, r.a.EnvoyAddr())}
	expect(t, "own port", own.ask(t, "d", 0, desc("k=v")), ok, status{ok, 5, 4})
	expect(t, "main port", r.ask(t, "d", 0, desc("k=v")), ok, status{ok, 5, 3})

	conn, err := grpc.NewClient(r.a.EnvoyAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health on the envoy port: %v", err)
	}
	_, err = allotv1.NewAllocatorClient(conn).GetRules(ctx, &allotv1.GetRulesRequest{})
	if grpcstatus.Code(err) != codes.Unimplemented {
		t.Fatalf("GetRules on the envoy port: %v, want Unimplemented", err)
	}
}

// A store that is down costs the store timeout and answers Unavailable,
// so that Envoy applies its failure mode; it never hangs.
func TestStoreDownIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	r := serve(t, allocator.Config{Rules: parse(t, section("5")), RedisURL: srv.URL(), StoreTimeout: 50 * time.Millisecond})
	expect(t, "up", r.ask(t, "d", 0, desc("k=down-test")), ok, status{ok, 5, 4})
	srv.Kill()
	start := time.Now()
	_, err := r.call("d", 0, desc("k=down-test"))
	if grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("with the store down: %v, want Unavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the answer took %v", took)
	}
}
