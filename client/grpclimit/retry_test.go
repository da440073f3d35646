package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/client/grpclimit"
	"github.com/allot-dev/allot/internal/clock"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// refuser is a real server on 127.0.0.1 that refuses its first calls with
// the status refuse returns, and counts every call.
type refuser struct {
	calls  atomic.Int64
	refuse func(call int64) error // nil: serve the call
}

func (r *refuser) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := r.refuse(r.calls.Add(1)); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// limited is a rate-limit refusal asking for a wait of d.
func limited(d time.Duration) error {
	st, _ := status.New(codes.ResourceExhausted, "rate limit exceeded").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	return st.Err()
}

// firstN refuses calls 1..n with err.
func firstN(n int64, err error) func(int64) error {
	return func(call int64) error {
		if call <= n {
			return err
		}
		return nil
	}
}

// retryRig dials a refuser through RetryUnary on a fake clock whose
// jitter draws are always half the range.
func retryRig(t *testing.T, opts grpclimit.RetryOptions, refuse func(int64) error) (*refuser, healthpb.HealthClient, *clock.Fake) {
	t.Helper()
	r := &refuser{refuse: refuse}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(r.unary))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	clk := clock.NewFake(t0)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.RetryUnaryOn(opts, clk, func() float64 { return 0.5 })))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return r, healthpb.NewHealthClient(conn), clk
}

// callAsync starts a Check and returns where its error arrives.
func callAsync(ctx context.Context, h healthpb.HealthClient) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	return done
}

// waitTimer waits until the interceptor is parked on its timer.
func waitTimer(t *testing.T, clk *clock.Fake) {
	t.Helper()
	if !clk.WaitTimers(1, 10*time.Second) {
		t.Fatal("the interceptor never waited")
	}
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return")
		return nil
	}
}

// A refused call is retried no earlier than its RetryInfo asks, plus the
// jitter (here 0.2 × 0.5 = 10%), and succeeds once the server lets it.
func TestRetryHonoursRetryInfo(t *testing.T) {
	r, h, clk := retryRig(t, grpclimit.RetryOptions{}, firstN(2, limited(3*time.Second)))
	done := callAsync(t.Context(), h)
	for retry := 1; retry <= 2; retry++ {
		waitTimer(t, clk)
		clk.Advance(3300*time.Millisecond - time.Nanosecond)
		if clk.Timers() != 1 || r.calls.Load() != int64(retry) {
			t.Fatalf("retry %d left early: %d calls, %d timers", retry, r.calls.Load(), clk.Timers())
		}
		clk.Advance(time.Nanosecond)
	}
	if err := result(t, done); err != nil {
		t.Fatalf("after two refusals: %v", err)
	}
	if n := r.calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

// Retries never wait past the caller's deadline: a wait that would end at
// or after it returns the refusal at once.
func TestRetryStaysWithinTheDeadline(t *testing.T) {
	t.Run("wait longer than the deadline", func(t *testing.T) {
		r, h, clk := retryRig(t, grpclimit.RetryOptions{}, firstN(1, limited(3*time.Second)))
		ctx, cancel := context.WithDeadline(t.Context(), clk.Now().Add(2*time.Second))
		defer cancel()
		err := result(t, callAsync(ctx, h))
		if status.Code(err) != codes.ResourceExhausted || r.calls.Load() != 1 || clk.Timers() != 0 {
			t.Fatalf("error %v after %d calls, %d timers: want the refusal at once", err, r.calls.Load(), clk.Timers())
		}
	})
	t.Run("as many as fit", func(t *testing.T) {
		r, h, clk := retryRig(t, grpclimit.RetryOptions{MaxAttempts: 10}, firstN(100, limited(3*time.Second)))
		ctx, cancel := context.WithDeadline(t.Context(), clk.Now().Add(8*time.Second))
		defer cancel()
		done := callAsync(ctx, h)
		for range 2 { // at 3.3 s and 6.6 s; a third would end at 9.9 s
			waitTimer(t, clk)
			clk.Advance(3300 * time.Millisecond)
		}
		err := result(t, done)
		if status.Code(err) != codes.ResourceExhausted || r.calls.Load() != 3 {
			t.Fatalf("error %v after %d calls, want the third refusal", err, r.calls.Load())
		}
	})
}

// A server that asks for no wait still gets the backoff, which grows
// (100 ms, 160 ms, 256 ms, each plus 10%); MaxAttempts ends it.
func TestRetryBacksOffAndStops(t *testing.T) {
	r, h, clk := retryRig(t, grpclimit.RetryOptions{}, firstN(100, limited(0)))
	done := callAsync(t.Context(), h)
	for i, wait := range []time.Duration{110 * time.Millisecond, 176 * time.Millisecond, 281600 * time.Microsecond} {
		waitTimer(t, clk)
		clk.Advance(wait - time.Nanosecond)
		if clk.Timers() != 1 {
			t.Fatalf("retry %d left before %v", i+1, wait)
		}
		clk.Advance(time.Nanosecond)
	}
	if err := result(t, done); status.Code(err) != codes.ResourceExhausted || r.calls.Load() != 4 {
		t.Fatalf("error %v after %d calls, want the 4th refusal", err, r.calls.Load())
	}
}

// Only rate-limit refusals are retried: not other codes, not a
// ResourceExhausted without RetryInfo, not a wait above MaxDelay.
func TestRetryOnlyRateLimitRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"unavailable", status.Error(codes.Unavailable, "down")},
		{"no RetryInfo", status.Error(codes.ResourceExhausted, "message too large")},
		{"a wait above MaxDelay", limited(time.Hour)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, h, _ := retryRig(t, grpclimit.RetryOptions{}, firstN(1, c.err))
			err := result(t, callAsync(t.Context(), h))
			if status.Code(err) != status.Code(c.err) || r.calls.Load() != 1 {
				t.Fatalf("error %v after %d calls, want %v after one", err, r.calls.Load(), c.err)
			}
		})
	}
}

// A caller that gives up while the interceptor waits gets Canceled at
// once.
func TestRetryStopsWhenCanceled(t *testing.T) {
	_, h, clk := retryRig(t, grpclimit.RetryOptions{}, firstN(1, limited(3*time.Second)))
	ctx, cancel := context.WithCancel(t.Context())
	done := callAsync(ctx, h)
	waitTimer(t, clk)
	cancel()
	if err := result(t, done); status.Code(err) != codes.Canceled {
		t.Fatalf("error %v, want Canceled", err)
	}
}

// Against a real grpclimit server on a real allocator: the refusal of a
// strict rule of 2 a day asks for hours, more than the caller's second, so
// the third call is answered with it at once.
func TestRetryAgainstARealRefusal(t *testing.T) {
	c := startAllocator(t)
	lim, err := grpclimit.New(c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "login"}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.RetryUnary(grpclimit.RetryOptions{Backoff: backoffMax(time.Hour)})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := healthpb.NewHealthClient(conn)
	call := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	for i := range 2 {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	start := time.Now()
	err = call()
	ri, _, _ := refusal(t, err)
	if took := time.Since(start); took > 500*time.Millisecond || ri.GetRetryDelay().AsDuration() < time.Minute {
		t.Fatalf("refusal asking %v came after %v: want it at once", ri.GetRetryDelay().AsDuration(), took)
	}
}

func backoffMax(d time.Duration) backoff.Config { return backoff.Config{MaxDelay: d} }
