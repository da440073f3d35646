package lease

import (
	"context"
	"errors"
	"time"

	"github.com/allot-dev/allot/internal/grant"
)

// Request asks the allocator for a lease on one key.
type Request struct {
	Rule, Key      string
	Want, Consumed int64
	ConsumedAge    time.Duration // since the first consumed token was admitted
	// WantRate asks for a share of the rule's rate, tokens per second.
	WantRate float64
	// Returned gives back tokens a share earned beyond the key's cap, from
	// the lease of epoch ReturnedEpoch.
	Returned, ReturnedEpoch int64
	// Held is what the key holds unspent as the request leaves, Returned
	// included: the store credits no return above it.
	Held int64
	// HeldFor is how long before the request left the key has held no
	// more than Held (store.AcquireRequest.HeldFor).
	HeldFor time.Duration
	// Seq numbers the key's requests: a retry carries the same, and the
	// allocator answers it again rather than applying it twice.
	Seq uint64
	// FallbackNodes is what the key's fallback divides the rule by, at
	// least, until the answer arrives: its last grant's; 0 before one.
	FallbackNodes int
	// OnFallback says the request left while the allocator was taken for
	// down: the key may admit on its fallback until the answer arrives.
	OnFallback bool
	// Settled is what settled reservations took beyond what the key held:
	// the allocator takes it from the key's bucket, into debt.
	Settled int64
	// Demand is the key's measured demand, tokens per second, whether or
	// not it asks for a share (allotv1.LeaseRequest.demand).
	Demand float64
	// WantRateNodes is what WantRate divided the rule's rate by when it is
	// not measured (a key's first request), 0 when it is: an allocator that
	// counts more live nodes divides by its count instead
	// (allotv1.LeaseRequest.want_rate_nodes).
	WantRateNodes int
}

// Grant is the allocator's answer to one Request: grant.Grant, the one
// definition of the message, which the store answers too.
type Grant = grant.Grant

// Answer is the allocator's answer to one Acquire call.
type Answer struct {
	Grants  []Grant // one per request, in order
	Version string  // the allocator's rules version
	Nodes   int     // the allocator's count of live nodes; 0: not said
}

// Return gives unused tokens back.
type Return struct {
	Rule, Key     string
	Tokens, Epoch int64
	Held          int64 // what the key held unspent: Tokens, as it leaves
}

// Transport reaches the allocator.
type Transport interface {
	Acquire(ctx context.Context, reqs []Request) (Answer, error)
	Release(ctx context.Context, rets []Return) error
}

// ErrRejected wraps an Acquire error that retrying will not cure (a bad
// request or an unknown rule); the manager does not treat it as an outage.
var ErrRejected = errors.New("lease: request rejected by the allocator")

// Rejection is an Acquire error that retrying will not cure, and which of
// the call's requests it is about. It is ErrRejected for errors.Is.
type Rejection struct {
	// Request is the index of the one request the allocator refused, or -1
	// when it refused the call as a whole (a store error, a refused
	// identity).
	Request int
	Err     error
}

func (r *Rejection) Error() string        { return ErrRejected.Error() + ": " + r.Err.Error() }
func (r *Rejection) Unwrap() error        { return r.Err }
func (r *Rejection) Is(target error) bool { return target == ErrRejected }
