package lease

import (
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// The lease calls on the wire (allot.v1): the one translation, for the
// SDK's transport and the simulator's.

// AcquireProto is node's Acquire call of reqs.
func AcquireProto(node string, reqs []Request) *allotv1.AcquireRequest {
	req := &allotv1.AcquireRequest{NodeId: node, Requests: make([]*allotv1.LeaseRequest, len(reqs))}
	for i, r := range reqs {
		lr := &allotv1.LeaseRequest{Rule: r.Rule, Key: r.Key, Want: r.Want, Consumed: r.Consumed,
			WantRate: r.WantRate, Returned: r.Returned, ReturnedEpoch: r.ReturnedEpoch, Seq: r.Seq,
			FallbackNodes: uint32(min(max(r.FallbackNodes, 0), math.MaxUint32)), OnFallback: r.OnFallback, Settled: r.Settled, Demand: r.Demand,
			WantRateNodes: uint32(min(max(r.WantRateNodes, 0), math.MaxUint32))}
		if r.ConsumedAge > 0 {
			lr.ConsumedAge = durationpb.New(r.ConsumedAge)
		}
		held := max(r.Held, 0)
		lr.Held = &held
		lr.HeldFor = durationpb.New(max(r.HeldFor, 0))
		req.Requests[i] = lr
	}
	return req
}

// AnswerOf is the Answer an AcquireResponse carries.
func AnswerOf(resp *allotv1.AcquireResponse) Answer {
	ans := Answer{Grants: make([]Grant, len(resp.GetLeases())), Version: resp.GetRulesVersion(), Nodes: int(resp.GetNodes())}
	for i, l := range resp.GetLeases() {
		ans.Grants[i] = Grant{Granted: l.GetGranted(), Remaining: l.GetRemaining(), TTL: l.GetTtl().AsDuration(),
			RetryAfter: l.GetRetryAfter().AsDuration(), Holders: int(l.GetHolders()), Epoch: l.GetEpoch(), Rate: l.GetRate(),
			FallbackNodes: int64(l.GetFallbackNodes())}
	}
	return ans
}

// ReleaseProto is node's Release call of rets.
func ReleaseProto(node string, rets []Return) *allotv1.ReleaseRequest {
	req := &allotv1.ReleaseRequest{NodeId: node, Returns: make([]*allotv1.Return, len(rets))}
	for i, r := range rets {
		held := max(r.Held, 0)
		req.Returns[i] = &allotv1.Return{Rule: r.Rule, Key: r.Key, Tokens: r.Tokens, Epoch: r.Epoch, Held: &held}
	}
	return req
}

// Classify marks the call errors that retrying will not cure (a Rejection,
// naming the request when the allocator's message does), so that they are
// not taken for an outage; the others it returns as they are.
func Classify(err error) error {
	switch status.Code(err) {
	case codes.NotFound, codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied,
		codes.Unauthenticated, codes.Internal:
		return &Rejection{Request: rejectedRequest(err), Err: err}
	}
	return err
}

// rejectedRequest reads which request of a batch a refusal is about: the
// allocator names the field first ("requests[3].key: ..."). -1: none.
func rejectedRequest(err error) int {
	msg := status.Convert(err).Message()
	for _, prefix := range []string{"requests[", "returns["} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			if end := strings.IndexByte(rest, ']'); end > 0 {
				if i, err := strconv.Atoi(rest[:end]); err == nil && i >= 0 {
					return i
				}
			}
		}
	}
	return -1
}
