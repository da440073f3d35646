package grpclimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/clock"
)

// RetryOptions configures RetryUnary. The zero value means the defaults.
type RetryOptions struct {
	// MaxAttempts bounds the attempts of one call, the first included.
	// default: 4
	MaxAttempts int
	// Backoff spaces the retries. The n-th retry waits the longer of what
	// the refusal's RetryInfo asks and BaseDelay·Multiplier^(n-1) (at most
	// MaxDelay), then up to Jitter of that again, at random: never earlier
	// than the server asked, and never all at once, since clients told
	// the same instant would otherwise trip the limit together again. A
	// refusal asking for more than MaxDelay is returned without waiting.
	// default: BaseDelay 100ms, Multiplier 1.6, Jitter 0.2, MaxDelay 10s
	Backoff backoff.Config
}

// DefaultRetryOptions are the options RetryUnary fills a zero field from.
func DefaultRetryOptions() RetryOptions {
	return RetryOptions{
		MaxAttempts: 4, // a few tries cover a burst; more would only add load
		Backoff: backoff.Config{
			BaseDelay:  100 * time.Millisecond, // a server that names no wait still gets a moment
			Multiplier: 1.6,                    // gRPC's own backoff growth
			Jitter:     0.2,                    // spreads clients told the same instant
			MaxDelay:   10 * time.Second,       // past this, tell the caller instead of hiding a long stall
		},
	}
}

func (o RetryOptions) withDefaults() RetryOptions {
	d := DefaultRetryOptions()
	if o.MaxAttempts > 0 {
		d.MaxAttempts = o.MaxAttempts
	}
	if o.Backoff.BaseDelay > 0 {
		d.Backoff.BaseDelay = o.Backoff.BaseDelay
	}
	if o.Backoff.Multiplier >= 1 {
		d.Backoff.Multiplier = o.Backoff.Multiplier
	}
	if o.Backoff.Jitter > 0 {
		d.Backoff.Jitter = o.Backoff.Jitter
	}
	if o.Backoff.MaxDelay > 0 {
		d.Backoff.MaxDelay = o.Backoff.MaxDelay
	}
	return d
}

// RetryUnary is a client interceptor that retries a unary call refused for
// a rate limit: codes.ResourceExhausted carrying google.rpc.RetryInfo, as
// this package's server interceptors, and Allot's allocator, refuse. Such a
// call never reached the handler, so trying it again is safe. It waits as
// RetryOptions.Backoff says, and never past the caller's deadline: when
// the wait would end at or after it, the refusal is returned at once, so
// the caller can act on it while it still has time. Any other error, and a
// ResourceExhausted without RetryInfo (a cost that can never pass, a
// message too large), is returned as it is.
//
//	conn, err := grpc.NewClient(addr, grpc.WithUnaryInterceptor(grpclimit.RetryUnary(grpclimit.RetryOptions{})), ...)
//
// Streams are not retried: a refused stream fails on its first message,
// after the caller has begun using it.
func RetryUnary(opts RetryOptions) grpc.UnaryClientInterceptor {
	return retryUnary(opts, clock.Real(), rand.Float64)
}

// retryUnary is RetryUnary on a given clock and source of randomness.
func retryUnary(opts RetryOptions, clk clock.Clock, random func() float64) grpc.UnaryClientInterceptor {
	r := &retrier{opts: opts.withDefaults(), clk: clk, random: random}
	return r.unary
}

type retrier struct {
	opts   RetryOptions
	clk    clock.Clock
	random func() float64 // in [0, 1)
}

func (r *retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, callOpts...)
		asked, ok := retryDelay(err)
		if !ok || attempt >= r.opts.MaxAttempts || asked > r.opts.Backoff.MaxDelay {
			return err
		}
		wait := r.wait(attempt, asked)
		if deadline, ok := ctx.Deadline(); ok && !r.clk.Now().Add(wait).Before(deadline) {
			return err
		}
		if werr := r.sleep(ctx, wait); werr != nil {
			return werr
		}
	}
}

// wait is how long the retry after attempt waits, the server asking for
// asked.
func (r *retrier) wait(attempt int, asked time.Duration) time.Duration {
	b := r.opts.Backoff
	floor := float64(b.BaseDelay)
	for range attempt - 1 {
		floor *= b.Multiplier
	}
	wait := max(asked, time.Duration(min(floor, float64(b.MaxDelay))))
	return wait + time.Duration(float64(wait)*b.Jitter*r.random())
}

// sleep waits d on the clock, or returns the status of ctx's end.
func (r *retrier) sleep(ctx context.Context, d time.Duration) error {
	t := r.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// retryDelay reads a rate-limit refusal: ResourceExhausted with RetryInfo.
func retryDelay(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return 0, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay := ri.GetRetryDelay()
			if delay == nil || delay.CheckValid() != nil {
				return 0, true
			}
			return max(delay.AsDuration(), 0), true
		}
	}
	return 0, false
}
