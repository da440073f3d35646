package client

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/lease"
)

// grpcTransport carries the lease manager's calls to the allocators.
type grpcTransport struct{ c *Client }

func (t grpcTransport) Acquire(ctx context.Context, reqs []lease.Request) (lease.Answer, error) {
	done := t.c.metrics.rpc("Acquire")
	var from answer // the allocator that answered, and its attempt's time
	resp, err := t.c.api.Acquire(ctx, lease.AcquireProto(t.c.cfg.NodeID, reqs), t.c.probing(), &from)
	done(err)
	if err != nil {
		return lease.Answer{}, t.c.classify(err)
	}
	if from.addr != "" {
		t.c.rtts.observe(from.addr, from.took)
	}
	return lease.AnswerOf(resp), nil
}

func (t grpcTransport) Release(ctx context.Context, rets []lease.Return) error {
	done := t.c.metrics.rpc("Release")
	_, err := t.c.api.Release(ctx, lease.ReleaseProto(t.c.cfg.NodeID, rets), t.c.probing())
	done(err)
	if err != nil {
		return t.c.classify(err)
	}
	return nil
}

// probing makes a call made while the allocator is thought down wait for a
// connection (within the call's short deadline), so that a refill goes out
// the moment a restarted allocator accepts; while it is up, calls fail fast,
// so that an outage is noticed at once.
func (c *Client) probing() grpc.CallOption {
	return grpc.WaitForReady(c.mgr.Down())
}

// classify marks the errors that retrying will not cure, so the lease
// manager does not take them for an outage, and refetches the rules when
// the allocator no longer knows one.
func (c *Client) classify(err error) error {
	switch status.Code(err) {
	case codes.NotFound, codes.FailedPrecondition:
		c.requestRules()
	}
	return lease.Classify(err)
}

// isUnreachable reports whether err means the allocator could not answer.
func isUnreachable(err error) bool {
	if errors.Is(err, lease.ErrRejected) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Unknown, codes.Aborted:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}
