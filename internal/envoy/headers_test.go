package envoy_test

import (
	"fmt"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot-dev/allot/internal/rules"
)

func withHeaders(mode string) string {
	return `
envoy:
  headers: ` + mode + `
  domains:
    - domain: messaging
      descriptors:
        - key: message_type
          value: marketing
          descriptors:
            - key: to_number
              rate_limit: { name: marketing, unit: day, requests_per_unit: 2 }
        - key: to_number
          rate_limit: { unit: day, requests_per_unit: 100 }
        - key: ldap
          rate_limit: { unlimited: true }
`
}

func headerMap(resp *rlspb.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, v := range resp.GetResponseHeadersToAdd() {
		h[v.GetKey()] = v.GetValue()
	}
	return h
}

func expectHeaders(t *testing.T, what string, resp *rlspb.RateLimitResponse, want map[string]string) {
	t.Helper()
	got := headerMap(resp)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: headers\n%v\nwant\n%v", what, got, want)
	}
}

// The headers Envoy is asked to add describe the binding limit (the one
// that refused, else the one with the least left), in Envoy's
// x-ratelimit form or in the draft's RateLimit fields; a refusal adds
// retry-after. 10 s into the day, the windows reset in 86390 s.
func TestResponseHeaders(t *testing.T) {
	marketing := desc("message_type=marketing", "to_number=1")
	number := desc("to_number=1")

	t.Run("x-ratelimit", func(t *testing.T) {
		r := start(t, withHeaders("x-ratelimit"))
		expectHeaders(t, "allowed", r.ask(t, "messaging", 0, marketing, number, desc("ldap=x")), map[string]string{
			"x-ratelimit-limit":     `2, 2;w=86400;name="marketing", 100;w=86400`,
			"x-ratelimit-remaining": "1",
			"x-ratelimit-reset":     "86390",
		})
		r.ask(t, "messaging", 0, marketing, number)
		expectHeaders(t, "refused", r.ask(t, "messaging", 0, marketing, number), map[string]string{
			"x-ratelimit-limit":     `2, 2;w=86400;name="marketing", 100;w=86400`,
			"x-ratelimit-remaining": "0",
			"x-ratelimit-reset":     "86390",
			"retry-after":           "86390",
		})
		expectHeaders(t, "unlimited only", r.ask(t, "messaging", 0, desc("ldap=x")), map[string]string{})
	})

	t.Run("ratelimit", func(t *testing.T) {
		r := start(t, withHeaders("ratelimit"))
		id := rules.EnvoyRuleName("messaging", "", []rules.EnvoyEntry{{Key: "to_number"}}, 86400e9)
		expectHeaders(t, "allowed", r.ask(t, "messaging", 0, number, marketing), map[string]string{
			"ratelimit-policy": fmt.Sprintf(`"%s";q=100;w=86400, "marketing";q=2;w=86400`, id),
			"ratelimit":        `"marketing";r=1;t=86390`,
		})
		resp := r.ask(t, "messaging", 99, number)
		expectHeaders(t, "the number's last 99", resp, map[string]string{
			"ratelimit-policy": fmt.Sprintf(`"%s";q=100;w=86400`, id),
			"ratelimit":        fmt.Sprintf(`"%s";r=0;t=86390`, id),
		})
		h := headerMap(r.ask(t, "messaging", 0, number))
		if h["retry-after"] != "86390" || !strings.HasSuffix(h["ratelimit"], ";r=0;t=86390") {
			t.Fatalf("refused: %v", h)
		}
	})

	t.Run("none", func(t *testing.T) {
		r := start(t, withHeaders("none"))
		expectHeaders(t, "none", r.ask(t, "messaging", 0, marketing, number), map[string]string{})
	})
}
