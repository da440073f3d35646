package allocator_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
)

const envoyOnlyRules = `
envoy:
  domains:
    - domain: edge
      descriptors:
        - key: ip
          rate_limit: { unit: second, requests_per_unit: 10 }
        - key: tenant
          descriptors:
            - key: path
              rate_limit: { unit: minute, requests_per_unit: 100 }
            - key: method
              value: POST
              rate_limit: { unlimited: true }
    - domain: messaging
      descriptors:
        - key: to_number
          rate_limit: { unit: day, requests_per_unit: 5 }
        - key: path
          value: /v1/*/send
          rate_limit: { unit: hour, requests_per_unit: 50 }
`

// waitRecord waits for a log record with msg and returns the last one.
func waitRecord(t *testing.T, logs *syncBuffer, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, rec := count(logs.records(t), msg); n > 0 {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log %q within 10s", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A file with only an envoy section serves no rule of its own (rules=0);
// the start-up and reload lines say what it loaded: its domains and the
// limits (descriptors with a rate_limit) in them, named apart from the
// Envoy listener's address (envoy).
func TestServingLogCountsTheEnvoySection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, envoyOnlyRules)
	var logs syncBuffer
	a, _ := start(t, allocator.Config{RulesFile: path, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	rec := waitRecord(t, &logs, "allocator serving")
	if rec["rules"] != 0.0 || rec["envoy_domains"] != 2.0 || rec["envoy_limits"] != 5.0 || rec["rules_version"] != a.Rules().Version() {
		t.Errorf("serving: rules=%v envoy_domains=%v envoy_limits=%v rules_version=%v, want 0, 2, 5 and %s",
			rec["rules"], rec["envoy_domains"], rec["envoy_limits"], rec["rules_version"], a.Rules().Version())
	}

	writeRules(t, path, "rules:\n  - name: api\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	rec = waitRecord(t, &logs, "rules reloaded")
	if rec["rules"] != 1.0 || rec["envoy_domains"] != 0.0 || rec["envoy_limits"] != 0.0 {
		t.Errorf("reloaded: rules=%v envoy_domains=%v envoy_limits=%v, want 1, 0 and 0", rec["rules"], rec["envoy_domains"], rec["envoy_limits"])
	}
}
