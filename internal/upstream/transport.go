package upstream

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/lease"
)

// LeaseTransport carries the lease manager's calls to the allocators: it
// is the lease.Transport a client's manager runs on.
type LeaseTransport struct {
	API    allotv1.AllocatorClient // on Conns: every call fails over
	NodeID string                  // the node the calls are made for
	// RoundTrips learns each answered Acquire's round trip.
	RoundTrips *RoundTrips
	// Timed starts timing a call of method; calling what it returns ends
	// the call with its error.
	Timed func(method string) func(error)
	// Down reports whether the lease manager thinks every allocator down.
	Down func() bool
	// RulesStale is called when an allocator no longer knows a rule the
	// node asked about, for the node to fetch the rules again.
	RulesStale func()
}

// Acquire asks the allocators for leases.
func (t *LeaseTransport) Acquire(ctx context.Context, reqs []lease.Request) (lease.Answer, error) {
	done := t.Timed("Acquire")
	var from Answer // the allocator that answered, and its attempt's time
	resp, err := t.API.Acquire(ctx, lease.AcquireProto(t.NodeID, reqs), t.probing(), &from)
	done(err)
	if err != nil {
		return lease.Answer{}, t.classify(err)
	}
	if from.Addr != "" {
		t.RoundTrips.Observe(from.Addr, from.Took)
	}
	return lease.AnswerOf(resp), nil
}

// Release gives tokens back to the allocators.
func (t *LeaseTransport) Release(ctx context.Context, rets []lease.Return) error {
	done := t.Timed("Release")
	_, err := t.API.Release(ctx, lease.ReleaseProto(t.NodeID, rets), t.probing())
	done(err)
	if err != nil {
		return t.classify(err)
	}
	return nil
}

// probing makes a call made while the allocator is thought down wait for a
// connection (within the call's short deadline), so that a refill goes out
// the moment a restarted allocator accepts; while it is up, calls fail fast,
// so that an outage is noticed at once.
func (t *LeaseTransport) probing() grpc.CallOption {
	return grpc.WaitForReady(t.Down())
}

// classify marks the errors that retrying will not cure, so the lease
// manager does not take them for an outage, and refetches the rules when
// the allocator no longer knows one.
func (t *LeaseTransport) classify(err error) error {
	switch status.Code(err) {
	case codes.NotFound, codes.FailedPrecondition:
		t.RulesStale()
	}
	return lease.Classify(err)
}

// IsUnreachable reports whether err means the allocator could not answer.
func IsUnreachable(err error) bool {
	if errors.Is(err, lease.ErrRejected) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Unknown, codes.Aborted:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}
