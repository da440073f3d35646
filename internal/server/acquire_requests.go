package server

import (
	"fmt"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// An Acquire's lease requests, checked field by field and turned into the
// store's: a rule resolved with its key's override, wants capped at what
// the rule allows, and what a node did not say told apart from a zero.

func (s *Server) acquireRequests(set *rules.Set, req *allotv1.AcquireRequest) ([]store.AcquireRequest, error) {
	if err := s.limits.checkNode(req.GetNodeId()); err != nil {
		return nil, err
	}
	if err := s.limits.checkBatch("requests", len(req.GetRequests())); err != nil {
		return nil, err
	}
	out := make([]store.AcquireRequest, len(req.GetRequests()))
	seen := make(map[ruleKey]int, len(out))
	for i, lr := range req.GetRequests() {
		field := fmt.Sprintf("requests[%d]", i)
		r, err := lookup(set, field+".rule", lr.GetRule())
		if err != nil {
			return nil, err
		}
		if r.IsConcurrency() {
			if out[i], err = s.slotRequest(field, r, lr, req.GetNodeId(), seen, i); err != nil {
				return nil, err
			}
			continue
		}
		if !r.Leasable() && (lr.GetWant() != 0 || lr.GetWantRate() != 0 || lr.GetReturned() != 0) {
			return nil, status.Errorf(codes.FailedPrecondition,
				"%s: rule %q is strict (%s) and is decided by Check, not leased; an Acquire on it may only report consumed and settled tokens (want, want_rate and returned 0)",
				field+".rule", r.Name, r.Algorithm)
		}
		if err := s.limits.checkKey(field+".key", lr.GetKey()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".want", lr.GetWant()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".consumed", lr.GetConsumed()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".returned", lr.GetReturned()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".settled", lr.GetSettled()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".held", lr.GetHeld()); err != nil {
			return nil, err
		}
		if lr.GetSeq() >= 1<<53 {
			return nil, grpcerr.Invalid(field+".seq", "must be below 2^53, got %d", lr.GetSeq())
		}
		wantRate := lr.GetWantRate()
		if math.IsNaN(wantRate) || math.IsInf(wantRate, 0) || wantRate < 0 {
			return nil, grpcerr.Invalid(field+".want_rate", "must be a finite rate of zero or more tokens per second, got %v", wantRate)
		}
		demand := lr.GetDemand()
		if math.IsNaN(demand) || math.IsInf(demand, 0) || demand < 0 {
			return nil, grpcerr.Invalid(field+".demand", "must be a finite rate of zero or more tokens per second, got %v", demand)
		}
		age, err := checkAge(field+".consumed_age", lr.GetConsumedAge())
		if err != nil {
			return nil, err
		}
		k := ruleKey{r.Name, lr.GetKey()}
		if j, dup := seen[k]; dup {
			return nil, grpcerr.Invalid(field, "repeats the rule and key of requests[%d]", j)
		}
		seen[k] = i
		// A node sizing its lease from an older rule set may ask for more
		// than the rule now allows; that is not an error, just a cap.
		// So may its wanted rate pass the rule's: capped as well.
		r = r.ForKey(lr.GetKey()) // a key with an override has its own limit
		want := min(lr.GetWant(), r.Lease.Max)
		out[i] = store.AcquireRequest{Rule: r, Key: lr.GetKey(), Node: req.GetNodeId(), Want: want,
			Consumed: lr.GetConsumed(), ConsumedAge: min(age, maxConsumedAge), WantRate: min(wantRate, r.Rate()),
			Returned: lr.GetReturned(), ReturnedEpoch: lr.GetReturnedEpoch(), Seq: int64(lr.GetSeq()),
			// A node that does not say what it holds (one before the field)
			// has its returns credited nothing: see store.AcquireRequest.
			Held: lr.GetHeld(), HeldKnown: lr.Held != nil, FallbackNodes: int64(lr.GetFallbackNodes()),
			OnFallback: lr.GetOnFallback(), Settled: lr.GetSettled(), Demand: demand,
			HeldFor: lr.GetHeldFor().AsDuration(), HeldForKnown: lr.HeldFor != nil}
	}
	return out, nil
}

type ruleKey struct{ rule, key string }

// divideFirstAsks lends a request that asked for the rule's rate divided
// by fewer nodes than this allocator counts live (want_rate_nodes, a key's
// first request) no more than the rate divided by the count: the first
// node of a cold fleet counts itself alone when it fetches the rules, and
// the store, which lends a share to whoever asks first, would lend it the
// whole rate and the others nothing until it renews (docs/design.md,
// "Leases"). A measured want is left as it is.
func divideFirstAsks(reqs []store.AcquireRequest, lrs []*allotv1.LeaseRequest, nodes uint32) {
	for i, lr := range lrs {
		if said := lr.GetWantRateNodes(); said > 0 && nodes > said && reqs[i].WantRate > 0 {
			reqs[i].WantRate = min(reqs[i].WantRate, reqs[i].Rule.Rate()/float64(nodes))
		}
	}
}

// maxConsumedAge bounds the age a node may claim: the store counts an age
// up to a lease's absence at most, which is longest for the longest TTL,
// and the cap keeps the arithmetic far from overflow.
var maxConsumedAge = rules.LeaseTuning{TTL: rules.MaxLeaseTTL}.Absence()

func (s *Server) leasableRule(set *rules.Set, field, name string) (*rules.Rule, error) {
	r, err := lookup(set, field, name)
	if err != nil {
		return nil, err
	}
	if !r.Leasable() && !r.IsConcurrency() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s: rule %q is strict (%s) and is decided by Check, not leased", field, name, r.Algorithm)
	}
	return r, nil
}
