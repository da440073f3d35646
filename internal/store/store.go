// Package store keeps the authoritative state of every (rule, key): in Redis
// through Lua scripts, or in memory for a single allocator. Both implement
// Store with the same semantics, which core.go defines and storetest checks.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/allot-dev/allot/internal/grant"
	"github.com/allot-dev/allot/internal/rules"
)

// Store grants leases and makes single decisions. Each (rule, key) is
// changed in one atomic step; a batch is one round trip to the backend.
type Store interface {
	// Acquire grants leases, one per request, in order.
	Acquire(ctx context.Context, reqs []AcquireRequest) ([]Lease, error)
	// Release credits unused tokens back and forgets the node as a holder.
	Release(ctx context.Context, rets []Return) error
	// Check decides one request of cost tokens.
	Check(ctx context.Context, rule *rules.Rule, key string, cost int64) (Decision, error)
	// Close releases the store's resources.
	Close() error
}

// AcquireRequest asks for a lease for one node on one (rule, key).
type AcquireRequest struct {
	Rule     *rules.Rule
	Key      string
	Node     string
	Want     int64 // tokens wanted, >= 0
	Consumed int64 // tokens admitted outside a lease, to debit first, >= 0
	// ConsumedAge is how long ago the first consumed token was admitted.
	ConsumedAge time.Duration
	// WantRate is the node's demand in tokens per second: it asks for a
	// share of the rule's refill rate for the lease's TTL. 0: tokens only.
	WantRate float64
	// Demand is the node's measured demand in tokens per second, said
	// whether or not it asks for a share (allotv1.LeaseRequest.demand):
	// the stores ignore it; a region sums its nodes' into its own.
	Demand float64
	// Returned are unused tokens given back before the grant, from the
	// lease of epoch ReturnedEpoch.
	Returned      int64
	ReturnedEpoch int64
	// Held is what the node holds unspent for the key as it sends, Returned
	// included, when HeldKnown: no return is credited above it. A request
	// without it (from a node that predates it) credits no return: the
	// store cannot tell tokens given back from tokens spent.
	Held      int64
	HeldKnown bool
	// HeldFor is how long before the request left the node has held no
	// more than Held, when HeldForKnown (allotv1.LeaseRequest.held_for):
	// before then it held up to what the store counted at its last
	// request, so refill earned before then does not fill the room its
	// spending opened (core_bucket.go's refillAround). Not known from a
	// node that predates it: Held is taken as held since its last request.
	HeldFor      time.Duration
	HeldForKnown bool
	// Settled is what the node's reservations cost beyond their estimate
	// once their work ended, past what it held to pay with: taken in full,
	// into a debt of at most the rule's (core_debt.go).
	Settled int64
	// For a strict rule a request only reports consumption (Want, WantRate
	// and Returned are 0): what the node admitted on its fallback allowance
	// while the allocator could not decide.
	//
	// Seq is the node's sequence number for this (rule, key), 0 for none.
	// A request with the seq of the node's last applied one is its retry
	// (the answer was lost): it is answered again, not applied again. On a
	// concurrency rule neither is one numbered below it, late (its sender
	// gave up on it): core_concurrency.go.
	Seq int64
	// FallbackNodes is what the node's fallback divides the rule by for
	// the key until this request's answer arrives, at least (the
	// FallbackNodes of its last lease on it); 0 when it does not say.
	FallbackNodes int64
	// OnFallback says the node sent the request while it took the
	// allocator for unreachable: it may admit on its fallback until the
	// answer arrives, and a holder back from an absence keeps its
	// reservation until its next request even when it reports nothing.
	OnFallback bool
	// SlotsKept, on a concurrency rule (core_concurrency.go), is what the
	// node keeps of the slots it holds; Want is then the slots it would
	// hold in all. The other fields mean nothing there.
	SlotsKept int64
}

// Reportable reports whether the store may take the request: any request
// on a leasable rule or a concurrency rule, a consumption report only on a
// strict one.
func (r *AcquireRequest) Reportable() bool {
	return r.Rule.Leasable() || r.Rule.IsConcurrency() || (r.Want == 0 && r.WantRate == 0 && r.Returned == 0)
}

// Lease is what the store lent: the one definition of the message is
// grant.Grant, which the node's lease bookkeeping takes too.
type Lease = grant.Grant

// Return gives back tokens of a lease. On a concurrency rule it gives back
// every slot the node holds of the key: Tokens and Epoch mean nothing.
type Return struct {
	Rule   *rules.Rule
	Key    string
	Node   string
	Tokens int64
	Epoch  int64
	// Held and HeldKnown are AcquireRequest's: without them the release
	// credits nothing (it still ends the node's holding).
	Held      int64
	HeldKnown bool
}

// Decision is the answer to Check.
type Decision struct {
	Allowed    bool
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

var (
	// ErrUnavailable wraps every failure to reach the backend.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrNotLeasable is returned by Acquire for strict rules.
	ErrNotLeasable = errors.New("store: rule is strict and cannot be leased")
	// ErrCostAboveCapacity is returned by Check for a cost that can never pass.
	ErrCostAboveCapacity = errors.New("store: cost exceeds the rule's capacity")
	// ErrConcurrencyCheck is returned by Check for a concurrency rule,
	// whose slots are leased and given back, never checked one by one.
	ErrConcurrencyCheck = errors.New("store: a concurrency rule's slots are leased (Acquire with slots_kept), not checked")
	// ErrCalendarClock is returned, wrapped in ErrUnavailable, when Redis'
	// clock lies outside the calendar windows the allocator computed from
	// its own clock: the two are more than a period apart. Nothing of the
	// call was applied.
	ErrCalendarClock = errors.New("store: the store's clock is outside the calendar windows this allocator sent; its clock and Redis' are more than a period apart")
)

// calendarClockReply is in the scripts' error reply of ErrCalendarClock
// (common.lua).
const calendarClockReply = "allot: calendar: store clock outside the windows sent"

// checkable is why a Check of cost on r cannot be decided, if it cannot:
// its context ended, its rule's slots are leased, or no state of the rule
// ever holds cost. Every store answers these the same, before its own work.
func checkable(ctx context.Context, r *rules.Rule, cost int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.IsConcurrency() {
		return ErrConcurrencyCheck
	}
	if cost > r.Capacity() {
		return ErrCostAboveCapacity
	}
	return nil
}
