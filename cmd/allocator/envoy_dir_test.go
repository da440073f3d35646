package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// --envoy-config-dir serves a directory of envoyproxy/ratelimit config
// files as they are, laid out as that service reads them, with no rules
// file, and SIGHUP reloads it.
func TestEnvoyConfigDirServesUpstreamFilesAndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runtime", "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("db.yaml", "---\ndomain: db\ndescriptors:\n  - key: database\n    value: orders\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n")
	write("edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n")
	cmd, stderr, exited := startChild(t, "ALLOT_CONFIG=", "ALLOT_ENVOY_LISTEN=127.0.0.1:0", "ALLOT_ENVOY_CONFIG_DIR="+dir)

	addr := waitLog(t, stderr, `"envoy":"`, `"`)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	limit := func(domain, key, value string) uint32 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if db, edge := limit("db", "database", "orders"), limit("edge", "remote_address", "10.0.0.1"); db != 5 || edge != 10 {
		t.Fatalf("limits %d and %d, want 5 and 10", db, edge)
	}
	waitLog(t, stderr, `"envoy_domains":2`, "")
	write("db.yaml", "domain: db\ndescriptors:\n  - key: database\n    value: orders\n    rate_limit:\n      unit: minute\n      requests_per_unit: 8\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, stderr, "rules reloaded", "")
	if got := limit("db", "database", "orders"); got != 8 {
		t.Fatalf("limit after SIGHUP %d, want 8", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
}
