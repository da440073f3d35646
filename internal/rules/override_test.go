package rules

import (
	"strings"
	"testing"
	"time"
)

const overridesYAML = `rules:
  - name: api
    algorithm: token_bucket
    limit: 1000
    period: 1m
    burst: 200
    shadow: true
    lease: { max: 100 }
    overrides:
      - key: tenant-42
        limit: 10000
      - match: "premium-*"
        limit: 5000
        burst: 500
      - match: "*-crawler"
        limit: 10
  - name: hourly
    algorithm: fixed_window
    limit: 100
    period: 1h
    overrides:
      - key: big
        limit: 100000
`

func TestOverridesApplyByKey(t *testing.T) {
	set, err := Parse("o.yaml", []byte(overridesYAML))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := set.Get("api")
	if !api.Shadow || !api.HasOverrides() {
		t.Fatalf("api: shadow %v, overrides %v", api.Shadow, api.HasOverrides())
	}
	for _, c := range []struct {
		key                   string
		limit, burst, leaseMx int64
	}{
		{"tenant-42", 10000, 2000, 100}, // burst scaled 200 × 10; the rule's lease max stays
		{"premium-gold", 5000, 500, 100},
		{"premium-", 5000, 500, 100},
		{"google-crawler", 10, 2, 2}, // burst 200 × 10/1000; lease max capped at it
		{"tenant-43", 1000, 200, 100},
		{"xpremium-gold", 1000, 200, 100},
	} {
		r := api.ForKey(c.key)
		if r.Name != "api" || r.Limit != c.limit || r.Burst != c.burst || r.Lease.Max != c.leaseMx || r.Period != time.Minute || !r.Shadow {
			t.Errorf("ForKey(%q) = %s limit %d burst %d lease.max %d period %v shadow %v, want limit %d burst %d lease.max %d",
				c.key, r.Name, r.Limit, r.Burst, r.Lease.Max, r.Period, r.Shadow, c.limit, c.burst, c.leaseMx)
		}
		if r.Limit != api.Limit && (r.HasOverrides() || r.Base() != api) {
			t.Errorf("ForKey(%q): an override's rule must have no overrides and the rule as its base", c.key)
		}
	}
	hourly, _ := set.Get("hourly")
	if big := hourly.ForKey("big"); big.Limit != 100000 || big.Burst != 100000 || big.Lease.Max != 100000 {
		t.Errorf("a window override: limit %d burst %d lease.max %d, want 100000 each (the rule's lease max is its capacity)", big.Limit, big.Burst, big.Lease.Max)
	}
	checkRoundTrip(t, set)
}

func TestOverrideVersion(t *testing.T) {
	a, err := Parse("o.yaml", []byte(overridesYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Parse("o.yaml", []byte(overridesYAML))
	c, err := Parse("o.yaml", []byte(strings.Replace(overridesYAML, "limit: 10000", "limit: 20000", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if a.Version() != b.Version() || a.Version() == c.Version() {
		t.Fatalf("versions %s %s %s: equal files must agree, a changed override must not", a.Version(), b.Version(), c.Version())
	}
}

func TestOverrideErrors(t *testing.T) {
	head := "rules:\n  - name: r\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n    overrides:\n"
	for _, c := range []struct{ yaml, want string }{
		{"      - limit: 5\n", `o.yaml:7: rule "r": field overrides[0]: names its keys with key (one key) or match (a pattern), exactly one of them`},
		{"      - { key: a, match: 'b*', limit: 5 }\n", `field overrides[0]: names its keys with key`},
		{"      - { key: a }\n", `o.yaml:7: rule "r": field overrides[0].limit: must be between 1`},
		{"      - { key: a, limit: 5 }\n      - { key: a, limit: 6 }\n", `o.yaml:8: rule "r": field overrides[1]: names the keys of overrides[0] again`},
		{"      - { match: abc, limit: 5 }\n", `field overrides[0].match: "abc" has no '*'`},
		{"      - { key: a, limit: 5, colour: red }\n", `field overrides[0].colour: unknown field (key, match, limit, burst)`},
		{"      - { key: a, limit: x }\n", `field overrides[0].limit: must be a whole number, got "x"`},
		{"      - { key: a, limit: 5, limit: 6 }\n", `field overrides[0].limit: given twice`},
		{"      - a\n", `field overrides[0]: must be a mapping`},
		{"      key: a\n", `field overrides: must be a list`},
	} {
		_, err := Parse("o.yaml", []byte(head+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	_, err := Parse("o.yaml", []byte("rules:\n  - { name: w, algorithm: fixed_window, limit: 10, period: 1s, overrides: [ { key: a, limit: 5, burst: 3 } ] }\n"))
	if err == nil || !strings.Contains(err.Error(), "overrides[0].burst: only token_bucket rules have a burst") {
		t.Errorf("a burst on a window override: %v", err)
	}
	_, err = Parse("o.yaml", []byte("rules:\n  - { name: l, algorithm: sliding_log, limit: 10, period: 1s, overrides: [ { key: a, limit: 20000 } ] }\n"))
	if err == nil || !strings.Contains(err.Error(), "overrides[0]: limit: a sliding_log keeps") {
		t.Errorf("a sliding log override above its cap: %v", err)
	}
}

// ForKey costs one nil check on a rule without overrides; with them, a map
// lookup and the patterns tried in order.
func BenchmarkForKey(b *testing.B) {
	set, err := Parse("o.yaml", []byte(overridesYAML))
	if err != nil {
		b.Fatal(err)
	}
	api, _ := set.Get("api")
	plain, _ := Example().Get("api-per-key")
	for _, c := range []struct {
		name string
		r    *Rule
		key  string
	}{{"none", plain, "tenant-1"}, {"exact", api, "tenant-42"}, {"miss", api, "tenant-1"}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.r.ForKey(c.key)
			}
		})
	}
}
