package grpclimit

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/client"
)

// exhausted is the status of a refused call: ResourceExhausted with
// RetryInfo and a QuotaFailure naming the rule (or, with several policies
// whose decider cannot be told, the rules) and the redacted key.
func exhausted(rule, who string, d client.Decision) error {
	retry := max(d.RetryAfter, 0)
	msg := fmt.Sprintf("rate limit %s exceeded; retry in %v", rule, retry.Round(time.Millisecond))
	v := &errdetails.QuotaFailure_Violation{
		Subject:     rule + "/" + who,
		Description: fmt.Sprintf("quota of %d per period of rule %s exceeded", d.Limit, rule),
	}
	if !strings.Contains(rule, ",") {
		v.QuotaId, v.QuotaValue = rule, d.Limit
	} else {
		v.Description = fmt.Sprintf("quota of %d per period of one of the rules %s exceeded", d.Limit, rule)
	}
	return withDetails(codes.ResourceExhausted, msg,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
}

// tooCostly refuses a call that costs more than a rule can ever hold. It
// has no RetryInfo: waiting would not help.
func tooCostly(rules, who string, cost int64) error {
	msg := fmt.Sprintf("call costs %d, more than rate limit %s allows at once", cost, rules)
	return withDetails(codes.ResourceExhausted, msg, &errdetails.QuotaFailure{
		Violations: []*errdetails.QuotaFailure_Violation{{Subject: rules + "/" + who, Description: msg}}})
}

func withDetails(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	with, err := st.WithDetails(details...)
	if err != nil { // only for a code of OK
		return st.Err()
	}
	return with.Err()
}
