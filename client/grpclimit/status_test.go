package grpclimit

import (
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
)

func TestPeriod(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24 * time.Hour: "24h", time.Hour: "1h", time.Minute: "1m", 90 * time.Minute: "1h30m",
		time.Hour + 5*time.Second: "1h0m5s", 1500 * time.Millisecond: "1.5s", 10 * time.Second: "10s",
	} {
		if got := period(d); got != want {
			t.Errorf("period(%v) = %q, want %q", d, got, want)
		}
	}
}

// A rule the node does not know when it answers (the rules were replaced
// since the decision) is still named; its quota is left out.
func TestExhaustedOfAnUnknownRule(t *testing.T) {
	c, err := client.New(client.Config{Logger: slog.New(slog.DiscardHandler),
		Rules: []client.Rule{{Name: "known", Algorithm: "sliding_log", Limit: 7, Period: 90 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Built by hand: New refuses a policy on a rule the client does not
	// know, and here "gone" stands for a rule replaced since the decision.
	i := &Interceptor{c: c, policies: []Policy{{Rule: "known"}, {Rule: "gone"}}, names: "known,gone"}
	for _, tc := range []struct {
		d    client.Decision
		want *errdetails.QuotaFailure_Violation
	}{
		{client.Decision{Rule: "known", Limit: 7, RetryAfter: time.Second},
			&errdetails.QuotaFailure_Violation{Subject: "known/key:0", QuotaId: "known", QuotaValue: 7,
				Description: "quota of 7 per 1m30s of rule known exceeded"}},
		{client.Decision{Rule: "gone", Limit: 3, RetryAfter: time.Second},
			&errdetails.QuotaFailure_Violation{Subject: "gone/key:0", QuotaId: "gone",
				Description: "quota of rule gone exceeded"}},
	} {
		st := status.Convert(i.exhausted(tc.d, "key:0"))
		if st.Code() != codes.ResourceExhausted || st.Message() != "rate limit "+tc.d.Rule+" exceeded; retry in 1s" {
			t.Fatalf("status %v", st)
		}
		var v *errdetails.QuotaFailure_Violation
		for _, d := range st.Details() {
			if qf, ok := d.(*errdetails.QuotaFailure); ok && len(qf.GetViolations()) == 1 {
				v = qf.GetViolations()[0]
			}
		}
		if v.GetSubject() != tc.want.Subject || v.GetQuotaId() != tc.want.QuotaId ||
			v.GetQuotaValue() != tc.want.QuotaValue || v.GetDescription() != tc.want.Description {
			t.Errorf("violation %v, want %v", v, tc.want)
		}
	}
}
