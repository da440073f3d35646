package envoy_test

import "testing"

// share_threshold, as envoyproxy/ratelimit reads it: every value a
// wildcard matches spends from one counter, while a wildcard without it
// keeps one counter per value, and a nested descriptor under a shared one
// shares the parent's pattern too.
func TestShareThresholdSharesOneCounterAcrossAPatternsValues(t *testing.T) {
	r := start(t, `
envoy:
  domains:
    - domain: files
      descriptors:
        - key: path
          value: /files/*
          share_threshold: true
          rate_limit: { unit: minute, requests_per_unit: 3 }
        - key: path
          value: /models/*
          rate_limit: { unit: minute, requests_per_unit: 2 }
        - key: tenant
          value: t-*
          share_threshold: true
          descriptors:
            - key: user
              rate_limit: { unit: minute, requests_per_unit: 2 }
`)
	for i, p := range []string{"/files/a.pdf", "/files/b.csv", "/files/c.txt"} {
		expect(t, p, r.ask(t, "files", 0, desc("path="+p)), ok, status{ok, 3, uint32(2 - i)})
	}
	expect(t, "a 4th file in the minute", r.ask(t, "files", 0, desc("path=/files/d")), over, status{over, 3, 0})

	for range 2 {
		r.ask(t, "files", 0, desc("path=/models/x"))
	}
	expect(t, "another model: its own counter", r.ask(t, "files", 0, desc("path=/models/y")), ok, status{ok, 2, 1})

	expect(t, "tenant t-1, user u", r.ask(t, "files", 0, desc("tenant=t-1", "user=u")), ok, status{ok, 2, 1})
	expect(t, "tenant t-2, user u: the tenants share", r.ask(t, "files", 0, desc("tenant=t-2", "user=u")), ok, status{ok, 2, 0})
	expect(t, "tenant t-3, user v: users do not", r.ask(t, "files", 0, desc("tenant=t-3", "user=v")), ok, status{ok, 2, 1})
}
