package envoy

import (
	"math"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sfv"
)

// respond writes the decisions as Envoy reads them: one status per
// descriptor, in order, and OVER_LIMIT overall if any enforced limit
// refused.
//
//   - no limit (none matched, an unknown domain, or replaced): OK, with no
//     current_limit, as envoyproxy/ratelimit answers;
//   - unlimited: OK with limit_remaining 4294967295;
//   - limited: the limit (name, requests_per_unit, unit, unit_multiplier),
//     what is left of it, and the time until it resets in whole seconds,
//     rounded up, as envoyproxy/ratelimit gives it (its window's length
//     less the whole seconds since the window began is the same number);
//     OVER_LIMIT when it refused, unless it is in shadow mode; a quota
//     limit says OVER_LIMIT in its status alone, and the overall code is
//     OVER_LIMIT for it only when every quota limit is (quotaExhausted).
func respond(checks []check) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK,
		Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(checks))}
	for i := range checks {
		c := &checks[i]
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch l := c.limit; {
		case l == nil:
		case l.Unlimited:
			st.LimitRemaining = math.MaxUint32
		default:
			st.CurrentLimit = currentLimit(l)
			st.LimitRemaining = clampUint32(c.d.Remaining)
			if reset := sfv.CeilSeconds(c.reset()); reset > 0 {
				st.DurationUntilReset = &durationpb.Duration{Seconds: reset}
			}
			if c.over && !l.Shadow {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			}
			if c.over && !l.Soft() {
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	if quotaExhausted(checks) {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return resp
}

func currentLimit(l *rules.EnvoyLimit) *rlspb.RateLimitResponse_RateLimit {
	out := &rlspb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit,
		Unit: rlspb.RateLimitResponse_RateLimit_Unit(l.Unit)}
	if l.UnitMultiplier > 1 {
		out.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	return out
}

// reset is the descriptor's duration_until_reset: when refused, the wait
// until the request could pass (the store's RetryAfter; after a refusal
// decided by the peek, the time until the limit is whole again, which is
// never less); when allowed, the time until the limit is whole again (for
// a fixed window, the window's end). A limit of 0, and hits above a limit,
// never pass: theirs is the end of the limit's window, as
// envoyproxy/ratelimit says (decide sets it).
func (c *check) reset() time.Duration {
	if c.over && c.d.RetryAfter > 0 {
		return c.d.RetryAfter
	}
	return c.d.ResetAfter
}
