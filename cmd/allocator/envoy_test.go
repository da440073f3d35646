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

// SIGHUP reloads the envoy section with the rules, in a running process
// serving Envoy on its own port (--envoy-listen).
func TestSIGHUPReloadsTheEnvoySection(t *testing.T) {
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(rpu string) {
		doc := "envoy:\n  domains:\n    - domain: d\n      descriptors:\n        - key: k\n" +
			"          rate_limit: { unit: day, requests_per_unit: " + rpu + " }\n"
		if err := os.WriteFile(rulesPath, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	cmd, stderr, exited := startChild(t, "ALLOT_ENVOY_LISTEN=127.0.0.1:0", "ALLOT_CONFIG="+rulesPath)

	addr := waitLog(t, stderr, `"envoy":"`, `"`)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	limit := func() uint32 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limit(); got != 1 {
		t.Fatalf("limit %d, want 1", got)
	}
	write("7")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, stderr, "rules reloaded", "")
	if got := limit(); got != 7 {
		t.Fatalf("limit after SIGHUP %d, want 7", got)
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
