package envoy

import (
	"strconv"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/sfv"
)

// headers are the response headers a ShouldRateLimit answer asks Envoy to
// add, chosen by the envoy section's headers setting. They describe the
// binding limit, the one that refused or else the one with the least
// left, as Envoy's own x-ratelimit headers do:
//
//	x-ratelimit (Envoy's DRAFT_VERSION_03):
//	  x-ratelimit-limit: 5, 5;w=86400;name="marketing", 100;w=86400
//	  x-ratelimit-remaining: 3
//	  x-ratelimit-reset: 3600
//	ratelimit (draft-ietf-httpapi-ratelimit-headers-10):
//	  ratelimit-policy: "marketing";q=5;w=86400, "envoy.messaging.to_number.3f0c1d9e2a";q=100;w=86400
//	  ratelimit: "marketing";r=3;t=3600
//
// An OVER_LIMIT answer adds retry-after, in whole seconds, at least 1,
// unless an enforced limit refuses for good (hopeless). Unlimited
// descriptors and those without a limit are left out; with none limited,
// no header is added.
func headers(mode rules.EnvoyHeaders, checks []check, overall rlspb.RateLimitResponse_Code) []*corepb.HeaderValue {
	if mode == rules.EnvoyHeadersNone {
		return nil
	}
	bind := binding(checks)
	if bind == nil {
		return nil
	}
	var out []*corepb.HeaderValue
	add := func(k, v string) { out = append(out, &corepb.HeaderValue{Key: k, Value: v}) }
	left := strconv.FormatInt(max(bind.d.Remaining, 0), 10)
	reset := strconv.FormatInt(sfv.CeilSeconds(bind.reset()), 10)
	var b strings.Builder
	switch mode {
	case rules.EnvoyHeadersXRateLimit:
		b.WriteString(strconv.FormatUint(uint64(bind.limit.RequestsPerUnit), 10))
		for i := range checks {
			if l := limited(&checks[i]); l != nil {
				b.WriteString(", ")
				b.WriteString(strconv.FormatUint(uint64(l.RequestsPerUnit), 10))
				b.WriteString(";w=")
				b.WriteString(strconv.FormatInt(sfv.CeilSeconds(l.Period()), 10))
				if l.Name != "" {
					b.WriteString(";name=")
					sfv.WriteString(&b, l.Name)
				}
			}
		}
		add("x-ratelimit-limit", b.String())
		add("x-ratelimit-remaining", left)
		add("x-ratelimit-reset", reset)
	case rules.EnvoyHeadersRateLimit:
		for i := range checks {
			if l := limited(&checks[i]); l != nil {
				if b.Len() > 0 {
					b.WriteString(", ")
				}
				sfv.WriteString(&b, policyName(l))
				b.WriteString(";q=")
				b.WriteString(strconv.FormatUint(uint64(l.RequestsPerUnit), 10))
				b.WriteString(";w=")
				b.WriteString(strconv.FormatInt(sfv.CeilSeconds(l.Period()), 10))
			}
		}
		add("ratelimit-policy", b.String())
		b.Reset()
		sfv.WriteString(&b, policyName(bind.limit))
		b.WriteString(";r=" + left + ";t=" + reset)
		add("ratelimit", b.String())
	}
	if overall == rlspb.RateLimitResponse_OVER_LIMIT && !hopeless(checks) {
		add("retry-after", strconv.FormatInt(max(sfv.CeilSeconds(bind.reset()), 1), 10))
	}
	return out
}

// hopeless reports whether an enforced limit refuses the request for good
// (a limit of 0, or more hits than it holds): a retry-after would promise a
// retry that can never pass, so there is none, as httplimit leaves it out
// for a cost above a rule's capacity. The reset fields still say when the
// limit's window ends.
func hopeless(checks []check) bool {
	for i := range checks {
		if c := &checks[i]; c.never && !c.limit.Soft() {
			return true
		}
	}
	return false
}

// limited is a descriptor's limit when it counts: not unlimited, not
// absent.
func limited(c *check) *rules.EnvoyLimit {
	if c.limit == nil || c.limit.Unlimited {
		return nil
	}
	return c.limit
}

// binding is the limit the headers describe: the enforced one that refused
// with the longest wait, else the one with the least left.
func binding(checks []check) *check {
	var refusal, least *check
	for i := range checks {
		c := &checks[i]
		if limited(c) == nil {
			continue
		}
		if c.over && (!c.limit.Soft() || c.limit.Quota && quotaExhausted(checks)) {
			if refusal == nil || c.reset() > refusal.reset() {
				refusal = c
			}
			continue
		}
		if least == nil || c.d.Remaining < least.d.Remaining {
			least = c
		}
	}
	if refusal != nil {
		return refusal
	}
	return least
}

// policyName names a limit in the draft's fields: its rate_limit name, or
// its rule's.
func policyName(l *rules.EnvoyLimit) string {
	if l.Name != "" {
		return l.Name
	}
	return l.ID
}
