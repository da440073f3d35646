package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/grpclimit"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// A policy on a concurrency rule holds a slot for a stream's life: a call
// beside an open Watch stream is refused ResourceExhausted with a
// RetryInfo and a QuotaFailure naming the rule; once the stream ends, the
// call passes.
func TestConcurrencyPolicy(t *testing.T) {
	set, err := rules.Parse("test", []byte("rules:\n  - name: one\n    algorithm: concurrency\n    limit: 1\n"))
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
	c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "one"}}})
	deadline := time.Now().Add(5 * time.Second)
	for check(t, h) != nil { // the key's first lease
		if time.Now().After(deadline) {
			t.Fatal("no slot within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the stream's handler runs
		t.Fatal(err)
	}
	err = check(t, h)
	retry, quota, st := refusal(t, err)
	if st.Code() != codes.ResourceExhausted || retry.GetRetryDelay().AsDuration() <= 0 ||
		quota.GetViolations()[0].GetQuotaId() != "one" || quota.GetViolations()[0].GetQuotaValue() != 1 {
		t.Fatalf("beside an open stream: %v %v %v", st, retry, quota)
	}
	cancel()
	deadline = time.Now().Add(5 * time.Second)
	for err := check(t, h); err != nil; err = check(t, h) {
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after the stream ended: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // the stream's handler returns
	}
}
