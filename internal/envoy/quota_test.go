package envoy_test

import "testing"

// quota_mode, as envoyproxy/ratelimit's quota mode answers: an exceeded
// quota limit says OVER_LIMIT in its own status while the request is
// admitted (Envoy can route to a backend with quota left), it keeps
// counting, and the request is refused once every quota limit it matched
// is exceeded, without spending. An enforced limit still refuses alone.
func TestQuotaModeAdmitsUntilEveryQuotaIsExceeded(t *testing.T) {
	r := start(t, `
envoy:
  domains:
    - domain: quotas
      descriptors:
        - key: backend
          value: primary
          quota_mode: true
          rate_limit: { unit: minute, requests_per_unit: 1 }
        - key: backend
          value: secondary
          quota_mode: true
          rate_limit: { unit: minute, requests_per_unit: 2 }
        - key: user
          rate_limit: { unit: minute, requests_per_unit: 1 }
`)
	primary, secondary := desc("backend=primary"), desc("backend=secondary")
	expect(t, "both have quota", r.ask(t, "quotas", 0, primary, secondary), ok,
		status{ok, 1, 0}, status{ok, 2, 1})
	expect(t, "primary exceeded: admitted, its status says so", r.ask(t, "quotas", 0, primary, secondary), ok,
		status{over, 1, 0}, status{ok, 2, 0})
	expect(t, "every quota exceeded: refused", r.ask(t, "quotas", 0, primary, secondary), over,
		status{over, 1, 0}, status{over, 2, 0})
	expect(t, "one quota, exceeded: every quota of the request is", r.ask(t, "quotas", 0, primary), over,
		status{over, 1, 0})

	r.clk.Advance(60e9) // the next minute
	user := desc("user=u")
	expect(t, "a quota with room and an enforced limit", r.ask(t, "quotas", 0, primary, user), ok,
		status{ok, 1, 0}, status{ok, 1, 0})
	expect(t, "the enforced limit refuses alone", r.ask(t, "quotas", 0, secondary, user), over,
		status{ok, 2, 2}, status{over, 1, 0})
	expect(t, "the refused request spent nothing of the quota", r.ask(t, "quotas", 0, secondary), ok,
		status{ok, 2, 1})
}

// An admitted request with an exceeded quota carries no retry-after (it
// passed); one refused because every quota is exceeded does: the longest
// wait of the exceeded quotas, as for any refusal.
func TestQuotaModeHeaders(t *testing.T) {
	r := start(t, `
envoy:
  headers: x-ratelimit
  domains:
    - domain: quotas
      descriptors:
        - key: backend
          value: primary
          quota_mode: true
          rate_limit: { unit: minute, requests_per_unit: 1 }
        - key: backend
          value: secondary
          quota_mode: true
          rate_limit: { unit: minute, requests_per_unit: 1 }
`)
	primary, secondary := desc("backend=primary"), desc("backend=secondary")
	r.ask(t, "quotas", 0, primary)
	resp := r.ask(t, "quotas", 0, primary, secondary)
	if h := headerMap(resp); resp.GetOverallCode() != ok || h["retry-after"] != "" {
		t.Fatalf("admitted with primary exceeded: overall %v, headers %v; want OK without retry-after", resp.GetOverallCode(), h)
	}
	resp = r.ask(t, "quotas", 0, primary, secondary)
	if h := headerMap(resp); resp.GetOverallCode() != over || h["retry-after"] != "50" {
		t.Fatalf("every quota exceeded: overall %v, headers %v; want OVER_LIMIT with retry-after 50", resp.GetOverallCode(), h)
	}
}
