package upstream

// One attempt of a call on one allocator: its part of the caller's
// deadline, and the verdict on its failure (eject the allocator or not, go
// on to another or not, and what may be sent again).

import (
	"context"
	"errors"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// budget is how much of the caller's deadline one attempt may use.
type budget uint8

const (
	// budgetAll: all that is left, for the last allocator to try.
	budgetAll budget = iota
	// budgetHalf: half of what is left, so that another allocator has
	// the rest.
	budgetHalf
)

// try makes one attempt on a within its budget, ejects a if its failure
// says it is sick, and says whether the call may go on to another
// allocator.
func (p *Conns) try(ctx context.Context, a *endpoint, b budget, method string, args, reply any,
	opts []grpc.CallOption) (took time.Duration, again bool, err error) {
	actx, cancel := p.attempt(ctx, b)
	defer cancel()
	left := time.Duration(math.MaxInt64)
	if deadline, ok := actx.Deadline(); ok {
		left = time.Until(deadline)
	}
	state := a.conn.GetState()
	start := time.Now()
	if err = a.conn.Invoke(actx, method, args, reply, opts...); err == nil {
		return time.Since(start), false, nil
	}
	eject, next := verdict(ctx, err)
	if eject && (status.Code(err) != codes.DeadlineExceeded || left >= p.patience) {
		p.eject(a, err)
	}
	// A call that failed fast on a connection that was not up never left
	// the node; any other may have been applied.
	sent := waitsForReady(opts) || state == connectivity.Ready || status.Code(err) != codes.Unavailable
	return 0, next && resendable(args, sent), err
}

// attempt bounds one attempt by its budget: half of what is left of
// ctx's deadline, or all of it. A call without a deadline gives a half
// budget a lease call's timeout.
func (p *Conns) attempt(ctx context.Context, b budget) (context.Context, context.CancelFunc) {
	if b == budgetAll {
		return ctx, func() {}
	}
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithTimeout(ctx, time.Until(deadline)/2)
	}
	return context.WithTimeout(ctx, p.timeout())
}

// CallerErr is the caller's own end of a call: ctx's error, or
// DeadlineExceeded once ctx's deadline has passed even if its timer has not
// fired yet. gRPC refuses a call whose deadline has passed as soon as it
// sees it, which on a busy machine is before the context says it is done:
// that failure is the caller's, not the allocator's.
func CallerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// verdict judges a failed attempt: whether its allocator is sick, and
// whether another allocator may answer the call.
func verdict(ctx context.Context, err error) (eject, next bool) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return false, false // the caller gave up: that says nothing of the allocator
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown:
		// No connection, no answer within the attempt's time (which may
		// have been all of the caller's), or a broken one.
		return true, CallerErr(ctx) == nil
	case codes.Canceled, codes.ResourceExhausted, codes.Aborted:
		// Its connection closed as it left the list, or it sheds load:
		// it is alive.
		return false, CallerErr(ctx) == nil
	}
	return false, false // a rejection: any allocator would say the same
}

// resendable reports whether a call may go to another allocator after one
// failed it, and fits args for that. sent says the failed allocator may
// have applied it. Spending twice only under-admits: a Check, or the
// consumption an Acquire reports, go again. Giving tokens back twice
// would raise a key's quota: an Acquire goes again without the tokens it
// returns (lost, as when the lease manager sees a call fail), a Release
// does not go again.
func resendable(args any, sent bool) bool {
	if !sent {
		return true
	}
	switch r := args.(type) {
	case *allotv1.ReleaseRequest:
		return false
	case *allotv1.AcquireRequest:
		for _, l := range r.GetRequests() {
			l.Returned, l.ReturnedEpoch = 0, 0
		}
	}
	return true
}

// waitsForReady reports whether a call waits for a connection rather than
// failing fast on one that is down.
func waitsForReady(opts []grpc.CallOption) bool {
	wait := false
	for _, o := range opts {
		if ff, ok := o.(grpc.FailFastCallOption); ok {
			wait = !ff.FailFast
		}
	}
	return wait
}
