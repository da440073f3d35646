package grpclimit

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/grpcerr"
)

// exhausted is the status of a refused call: ResourceExhausted with
// RetryInfo and a QuotaFailure naming the rule that refused and the
// redacted key. The quota is the rule's limit as the node applies it now;
// it is left out when the node does not know the rule (the rules were
// replaced since the decision).
func (i *Interceptor) exhausted(d client.Decision, who string) error {
	rule := d.Rule
	if rule == "" { // a guard: the SDK names the rule of every decision
		rule = i.names
	}
	retry := max(d.RetryAfter, 0)
	msg := fmt.Sprintf("rate limit %s exceeded; retry in %v", rule, retry.Round(time.Millisecond))
	v := &errdetails.QuotaFailure_Violation{
		Subject:     rule + "/" + who,
		QuotaId:     d.Rule,
		Description: fmt.Sprintf("quota of rule %s exceeded", rule),
	}
	if r, ok := i.c.Rule(d.Rule); ok {
		v.QuotaValue = r.Limit
		v.Description = fmt.Sprintf("quota of %d per %s of rule %s exceeded", r.Limit, period(r.Period), rule)
	}
	return grpcerr.New(codes.ResourceExhausted, msg,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
}

// period writes a rule's period without the zero units time.Duration
// spells out: "24h", "1m", "1h30m", "1.5s".
func period(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
		if t, ok := strings.CutSuffix(s, "h0m"); ok {
			s = t + "h"
		}
	}
	return s
}

// tooCostly refuses a call that costs more than a rule can ever hold. It
// has no RetryInfo: waiting would not help.
func tooCostly(rules, who string, cost int64) error {
	msg := fmt.Sprintf("call costs %d, more than rate limit %s allows at once", cost, rules)
	return grpcerr.New(codes.ResourceExhausted, msg, &errdetails.QuotaFailure{
		Violations: []*errdetails.QuotaFailure_Violation{{Subject: rules + "/" + who, Description: msg}}})
}
