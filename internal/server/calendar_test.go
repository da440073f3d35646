package server_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

const calendarRules = `
rules:
  - name: monthly
    algorithm: fixed_window
    limit: LIMIT
    period: month
    time_zone: Europe/Paris
`

func calendarSet(t *testing.T, limit string) *rules.Set {
	t.Helper()
	set, err := rules.Parse("test", []byte(strings.Replace(calendarRules, "LIMIT", limit, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestCalendarCheck: a calendar rule is decided by Check, says the
// calendar's reset in retry_after and reset_after (February's end in
// Paris, not 744 hours on), refuses leases as a strict rule, and keeps what
// a month spent when a reload raises or cuts its limit.
func TestCalendarCheck(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2027, 2, 28, 21, 30, 0, 0, paris))
	st := store.NewMemory(clk)
	t.Cleanup(func() { st.Close() })
	c, srv := serveWith(t, server.Config{Store: st, Rules: calendarSet(t, "3")})
	check := func() *allotv1.CheckResponse {
		t.Helper()
		resp, err := c.Check(ctx(t), &allotv1.CheckRequest{Rule: "monthly", Key: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 3 {
		if resp := check(); !resp.Allowed || resp.Remaining != int64(2-i) || resp.ResetAfter.AsDuration() != 150*time.Minute {
			t.Fatalf("check %d: %v, want allowed, reset at midnight in Paris", i, resp)
		}
	}
	resp := check()
	if resp.Allowed || resp.RetryAfter.AsDuration() != 150*time.Minute || resp.ResetAfter.AsDuration() != 150*time.Minute {
		t.Fatalf("fourth check: %v, want refused until midnight in Paris (2h30)", resp)
	}
	srv.SetRules(calendarSet(t, "5")) // raised: two more at once
	if a, b, c := check(), check(), check(); !a.Allowed || !b.Allowed || c.Allowed {
		t.Fatalf("raised to 5 with 3 spent: %v, %v, %v: want two more", a, b, c)
	}
	srv.SetRules(calendarSet(t, "4")) // cut below what was spent
	if resp := check(); resp.Allowed || resp.Remaining != 0 {
		t.Fatalf("cut to 4 with 5 spent: %v, want refused", resp)
	}
	clk.Advance(150 * time.Minute) // March, in Paris
	if resp := check(); !resp.Allowed || resp.ResetAfter.AsDuration() != 31*24*time.Hour-time.Hour {
		t.Fatalf("in March: %v, want allowed, reset in 31 days less the hour the clocks go forward", resp)
	}

	_, err = c.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "monthly", Key: "tenant", Want: 5}}})
	wantStatus(t, err, codes.FailedPrecondition, "strict")
	rs, err := c.GetRules(ctx(t), &allotv1.GetRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs.Rules[0]; !r.Strict || r.Period.AsDuration() != 31*24*time.Hour {
		t.Fatalf("GetRules: %v, want a strict rule of the month's nominal 744h", r)
	}
}
