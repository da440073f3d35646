package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// slotRequest turns a lease request on a concurrency rule into the
// store's: want is the slots the node would hold, slots_kept what it keeps
// of those it holds, seq its number (store/core_concurrency.go). The token fields mean
// nothing there, and a request that sets one is refused, so that a node
// that took the rule for a token rule learns it at once.
func (s *Server) slotRequest(field string, r *rules.Rule, lr *allotv1.LeaseRequest, node string, seen map[ruleKey]int, i int) (store.AcquireRequest, error) {
	if lr.GetConsumed() != 0 || lr.GetWantRate() != 0 || lr.GetReturned() != 0 || lr.GetSettled() != 0 || lr.Held != nil {
		return store.AcquireRequest{}, status.Errorf(codes.FailedPrecondition,
			"%s: rule %q is a concurrency rule: a request on it says want and slots_kept only (consumed, want_rate, returned, settled and held unset)",
			field+".rule", r.Name)
	}
	if err := s.limits.checkKey(field+".key", lr.GetKey()); err != nil {
		return store.AcquireRequest{}, err
	}
	if err := s.limits.checkTokens(field+".want", lr.GetWant()); err != nil {
		return store.AcquireRequest{}, err
	}
	if err := s.limits.checkTokens(field+".slots_kept", lr.GetSlotsKept()); err != nil {
		return store.AcquireRequest{}, err
	}
	if lr.GetSeq() >= 1<<53 {
		return store.AcquireRequest{}, grpcerr.Invalid(field+".seq", "must be below 2^53, got %d", lr.GetSeq())
	}
	k := ruleKey{r.Name, lr.GetKey()}
	if j, dup := seen[k]; dup {
		return store.AcquireRequest{}, grpcerr.Invalid(field, "repeats the rule and key of requests[%d]", j)
	}
	seen[k] = i
	// A want above the rule's (an older rule set) is a cap, not an error.
	return store.AcquireRequest{Rule: r, Key: lr.GetKey(), Node: node, Want: min(lr.GetWant(), r.Lease.Max),
		SlotsKept: lr.GetSlotsKept(), Seq: int64(lr.GetSeq())}, nil
}
