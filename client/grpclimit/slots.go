package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/internal/middleware"
	"github.com/allot-dev/allot/internal/grpcerr"
)

// A policy on a concurrency rule holds a slot of its key for the call's
// life (a stream's, for a stream): taken before the rate policies are
// decided, given back when the handler returns. A call that finds no slot
// free ends with ResourceExhausted, a RetryInfo of the hold time the node
// has observed, and a QuotaFailure naming the rule.

// splitSlots moves the policies on concurrency rules out of i.policies.
func (i *Interceptor) splitSlots() {
	i.policies, i.slotPolicies, i.rules = middleware.SplitSlots(i.c, i.policies, func(p Policy) string { return p.Rule })
}

// takeSlots takes a slot for each slot policy; a non-nil error is the
// call's answer. The caller releases what it returns.
func (i *Interceptor) takeSlots(ctx context.Context, method string) ([]*client.Slot, error) {
	held, failed, err := middleware.TakeSlots(ctx, i.c, i.slotPolicies,
		func(p Policy) string { return p.Rule }, func(p Policy) string { return i.policyKey(ctx, method, p) })
	if err == nil {
		return held, nil
	}
	p := i.slotPolicies[failed]
	var se *client.SlotError
	switch {
	case errors.As(err, &se):
		return nil, i.noSlot(p.Rule, redact(i.policyKey(ctx, method, p)), se.RetryAfter)
	case errors.Is(err, client.ErrUnknownRule), errors.Is(err, client.ErrNotConcurrency):
		i.errLogs.Do(func() {
			i.opts.Logger.Error("grpclimit: call refused: a concurrency policy's rule is not one now", "rule", p.Rule, "method", method, "err", err)
		})
		return nil, status.Errorf(codes.Internal, "concurrency limit %q is not defined", p.Rule)
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	i.errLogs.Do(func() {
		i.opts.Logger.Warn("grpclimit: no slot decided", "rule", p.Rule, "method", method, "err", err)
	})
	return nil, i.opts.OnError(ctx, method, err) // nil: served without the slots
}

// policyKey is p's key for a call: its own, or the interceptor's.
func (i *Interceptor) policyKey(ctx context.Context, method string, p Policy) string {
	if p.Key != nil {
		if k, ok := p.Key(ctx, method); ok && k != "" {
			return middleware.BoundedKey("", k)
		}
	}
	return i.key(ctx)
}

// noSlot is the status of a call that found no slot free.
func (i *Interceptor) noSlot(rule, who string, retry time.Duration) error {
	v := &errdetails.QuotaFailure_Violation{Subject: rule + "/" + who, QuotaId: rule,
		Description: fmt.Sprintf("concurrency limit of rule %s reached", rule)}
	if r, ok := i.c.Rule(rule); ok {
		v.QuotaValue = r.Limit
		v.Description = fmt.Sprintf("concurrency limit of %d in flight of rule %s reached", r.Limit, rule)
	}
	return grpcerr.New(codes.ResourceExhausted, fmt.Sprintf("concurrency limit %s reached; retry in %v", rule, retry.Round(time.Millisecond)),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
}
