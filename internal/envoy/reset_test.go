package envoy_test

import (
	"fmt"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const neverPass = `
envoy:
  headers: x-ratelimit
  domains:
    - domain: d
      descriptors:
        - key: blocked
          rate_limit: { unit: day, requests_per_unit: 0 }
        - key: daily
          rate_limit: { unit: day, requests_per_unit: 100 }
        - key: two_hours
          rate_limit: { unit: hour, requests_per_unit: 5, unit_multiplier: 2 }
`

// untilReset is a status's duration_until_reset; -1 when it has none.
func untilReset(st *rlspb.RateLimitResponse_DescriptorStatus) time.Duration {
	if st.GetDurationUntilReset() == nil {
		return -1
	}
	return st.GetDurationUntilReset().AsDuration()
}

// A limit of 0, and hits above a limit, can never pass: they are answered
// as envoyproxy/ratelimit answers every limited status, with the whole
// seconds to the end of the limit's window (its period's, from the Unix
// epoch), and without a retry-after that no retry could honour. They once
// said a reset of 0 and retry-after: 1.
func TestNeverPassingAnswersTheWindowsEnd(t *testing.T) {
	r := start(t, neverPass) // 10 s into the day
	query := desc("blocked=x")
	query.HitsAddend = wrapperspb.UInt64(0)
	cases := []struct {
		name  string
		hits  uint32
		d     *ratelimitpb.RateLimitDescriptor
		code  rlspb.RateLimitResponse_Code
		reset time.Duration
	}{
		{"a limit of 0", 0, desc("blocked=x"), over, 86390 * time.Second},
		{"a limit of 0, asked without hits", 0, query, ok, 86390 * time.Second},
		{"hits above the limit", 101, desc("daily=x"), over, 86390 * time.Second},
		{"hits above a two-hour limit", 6, desc("two_hours=x"), over, 7190 * time.Second},
	}
	for _, c := range cases {
		resp := r.ask(t, "d", c.hits, c.d)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != c.code || st.GetLimitRemaining() != 0 || untilReset(st) != c.reset {
			t.Errorf("%s: %v, remaining %d, duration_until_reset %v; want %v, 0, %v",
				c.name, resp.GetOverallCode(), st.GetLimitRemaining(), untilReset(st), c.code, c.reset)
		}
		h := headerMap(resp)
		if h["x-ratelimit-reset"] != fmt.Sprint(int64(c.reset/time.Second)) {
			t.Errorf("%s: x-ratelimit-reset %q, want %d", c.name, h["x-ratelimit-reset"], c.reset/time.Second)
		}
		if ra, has := h["retry-after"]; has {
			t.Errorf("%s: retry-after %q: a request that can never pass has none", c.name, ra)
		}
	}
	expect(t, "nothing was charged", r.ask(t, "d", 0, desc("daily=x")), ok, status{ok, 100, 99})
}

// duration_until_reset is whole seconds, rounded up, as envoyproxy/ratelimit
// gives it (the window's length less the whole seconds since it began):
// 11.5 s into the day, a day's window says 86389 s, never 86388.5 s.
func TestDurationUntilResetIsWholeSeconds(t *testing.T) {
	r := start(t, neverPass)
	r.clk.Advance(1500 * time.Millisecond)
	for _, c := range []struct {
		name string
		hits uint32
		code rlspb.RateLimitResponse_Code
	}{{"allowed", 1, ok}, {"refused", 100, over}} {
		resp := r.ask(t, "d", c.hits, desc("daily=x"))
		if got := untilReset(resp.GetStatuses()[0]); resp.GetOverallCode() != c.code || got != 86389*time.Second {
			t.Errorf("%s: %v, duration_until_reset %v; want %v, 86389s", c.name, resp.GetOverallCode(), got, c.code)
		}
	}
}
