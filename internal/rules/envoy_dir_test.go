package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// upstreamDir writes files into RUNTIME_ROOT/ratelimit/config, the layout
// envoyproxy/ratelimit reads, and returns that config directory.
func upstreamDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "srv", "runtime_data", "current", "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Files in envoyproxy/ratelimit's own shape (one domain each, unwrapped),
// the cases of its examples/ratelimit/config directory, written here.
const (
	upstreamGateway = `---
domain: gateway
descriptors:
  - key: source_cluster
    value: edge
    descriptors:
      - key: destination_cluster
        value: backend
        rate_limit:
          unit: minute
          requests_per_unit: 1
  - key: header_a
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: header_b
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: header_b
        value: blocked
        rate_limit:
          unit: minute
          requests_per_unit: 0
      - key: header_c
        rate_limit:
          unlimited: true
      - key: header_d
        value: trial
        rate_limit:
          unit: minute
          requests_per_unit: 1
        shadow_mode: true
  - key: internal
    rate_limit:
      unlimited: true
`
	upstreamQuota = `---
domain: quotas
descriptors:
  - key: backend
    value: primary
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: backend
    value: secondary
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
`
	upstreamDatabase = `---
domain: db_calls
descriptors:
  - key: database
    value: orders

    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: database
    value: fallback
    rate_limit:
      unit: minute
      requests_per_unit: 5
`
)

func TestEnvoyDirLoadsUpstreamFilesAsTheyAre(t *testing.T) {
	dir := upstreamDir(t, map[string]string{
		"gateway.yaml": upstreamGateway,
		"database.yml": upstreamDatabase,
		"quota.yaml":   upstreamQuota,
		".gateway.swp": "not yaml at all: [",
		"README.md":    "# not a config file",
		".hidden.yaml": "domain: hidden\n",
	})
	if err := os.Mkdir(filepath.Join(dir, "..2026_12_02"), 0o755); err != nil { // a Kubernetes volume's data dir
		t.Fatal(err)
	}
	base, err := NewSet(nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := WithEnvoyDir(base, dir)
	if err != nil {
		t.Fatal(err)
	}
	e := set.Envoy()
	if got := strings.Join(e.Domains(), ","); got != "db_calls,gateway,quotas" {
		t.Fatalf("domains %q, want db_calls,gateway,quotas in file name order", got)
	}
	cases := []struct {
		domain  string
		entries []string
		limit   uint32 // 0 with unlimited or none
		want    string // "limit", "unlimited", "shadow", "none"
	}{
		{"gateway", []string{"source_cluster=edge", "destination_cluster=backend"}, 1, "limit"},
		{"gateway", []string{"header_a=x"}, 2, "limit"},
		{"gateway", []string{"header_a=x", "header_b=y"}, 3, "limit"},
		{"gateway", []string{"header_a=x", "header_b=blocked"}, 0, "limit"},
		{"gateway", []string{"header_a=x", "header_c=z"}, 0, "unlimited"},
		{"gateway", []string{"header_a=x", "header_d=trial"}, 1, "shadow"},
		{"gateway", []string{"header_a=x", "header_d=other"}, 0, "none"},
		{"gateway", []string{"internal=1"}, 0, "unlimited"},
		{"db_calls", []string{"database=orders"}, 5, "limit"},
		{"db_calls", []string{"database=other"}, 0, "none"},
		{"quotas", []string{"backend=secondary"}, 2, "quota"},
	}
	for _, c := range cases {
		l := lookup(t, e, c.domain, c.entries...)
		got := "none"
		switch {
		case l == nil:
		case l.Unlimited:
			got = "unlimited"
		case l.Shadow:
			got = "shadow"
		case l.Quota:
			got = "quota"
		default:
			got = "limit"
		}
		if got != c.want || l != nil && !l.Unlimited && l.RequestsPerUnit != c.limit {
			t.Errorf("%s %v: got %s %+v, want %s of %d", c.domain, c.entries, got, l, c.want, c.limit)
		}
	}
	again, err := WithEnvoyDir(base, dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Version() != set.Version() || set.Version() == base.Version() {
		t.Fatalf("versions %s, %s (base %s): want one version per content, apart from the base's", set.Version(), again.Version(), base.Version())
	}
}

func TestEnvoyDirAddsToTheSectionAndKeepsItsHeaders(t *testing.T) {
	base, err := Parse("rules.yaml", []byte(envoyExamples))
	if err != nil {
		t.Fatal(err)
	}
	set, err := WithEnvoyDir(base, upstreamDir(t, map[string]string{"db.yaml": upstreamDatabase}))
	if err != nil {
		t.Fatal(err)
	}
	if set.Envoy().Headers != EnvoyHeadersXRateLimit || set.Len() != base.Len() {
		t.Fatalf("headers %v, rules %d: want the section's headers and rules kept", set.Envoy().Headers, set.Len())
	}
	if lookup(t, set.Envoy(), "messaging", "to_number=1") == nil || lookup(t, set.Envoy(), "db_calls", "database=orders") == nil {
		t.Fatal("want the section's domains and the directory's")
	}
	dup := upstreamDir(t, map[string]string{"m.yaml": "domain: messaging\ndescriptors: []\n"})
	_, err = WithEnvoyDir(base, dup)
	want := filepath.Join(dup, "m.yaml") + `:1: domain: domain "messaging" is given twice (also in the rules file's envoy section)`
	if err == nil || err.Error() != want {
		t.Fatalf("err %v, want %s", err, want)
	}
}

func TestEnvoyDirErrorsNameFileLineAndField(t *testing.T) {
	base, _ := NewSet(nil)
	cases := []struct {
		name, files, body, want string
	}{
		{"bad unit", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			`a.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
		{"no domain", "a.yaml", "descriptors:\n  - key: k\n", `a.yaml:1: domain: is required`},
		{"the envoy wrapping", "a.yaml", "envoy:\n  domains: []\n", `a.yaml:1: envoy: unknown field (domain, algorithm, descriptors)`},
		{"quota_mode without a rate_limit", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			`a.yaml:4: descriptors[0].quota_mode: applies to a rate_limit`},
		{"quota_mode and shadow_mode", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true\n    quota_mode: true\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
			`a.yaml:5: descriptors[0].quota_mode: and shadow_mode: a limit is one or the other`},
		{"share_threshold without a pattern", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			`a.yaml:5: descriptors[0].share_threshold: applies to a value with a '*'`},
		{"share_threshold not a bool", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    value: v*\n    share_threshold: often\n",
			`a.yaml:5: descriptors[0].share_threshold: must be true or false, got "often"`},
		{"value_to_metric", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    value_to_metric: true\n",
			`a.yaml:4: descriptors[0].value_to_metric: not supported:`},
		{"metadata", "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    metadata: {}\n",
			`a.yaml:4: descriptors[0].metadata: not supported:`},
		{"syntax", "a.yaml", "domain: a\ndescriptors:\n  - key: [\n", `a.yaml:`},
		{"two documents", "a.yaml", "domain: a\n---\ndomain: b\n", `a.yaml:2: domain: a second YAML document`},
		{"empty", "a.yaml", "# nothing\n", `a.yaml: domain: the file is empty`},
	}
	for _, c := range cases {
		dir := upstreamDir(t, map[string]string{c.files: c.body})
		_, err := WithEnvoyDir(base, dir)
		if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, c.want)) && !strings.HasPrefix(err.Error(), dir+"/"+c.want) {
			t.Errorf("%s: err %v, want it to start %s/%s", c.name, err, dir, c.want)
		}
	}
	two := upstreamDir(t, map[string]string{"a.yaml": "domain: same\n", "b.yaml": "\n\ndomain: same\n"})
	_, err := WithEnvoyDir(base, two)
	want := filepath.Join(two, "b.yaml") + `:3: domain: domain "same" is given twice (also in ` + filepath.Join(two, "a.yaml") + `:1)`
	if err == nil || err.Error() != want {
		t.Errorf("duplicate: err %v, want %s", err, want)
	}
	empty := upstreamDir(t, map[string]string{"notes.txt": "x"})
	if _, err := WithEnvoyDir(base, empty); err == nil || !strings.Contains(err.Error(), "holds no *.yaml file") {
		t.Errorf("empty directory: err %v, want it refused", err)
	}
	broken := upstreamDir(t, map[string]string{"a.yaml": "domain: a\n"})
	if err := os.Symlink(filepath.Join(broken, "gone.yaml"), filepath.Join(broken, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := WithEnvoyDir(base, broken); err == nil || !strings.Contains(err.Error(), "b.yaml") {
		t.Errorf("a link to nothing: err %v, want it named", err)
	}
	if _, err := WithEnvoyDir(base, filepath.Join(empty, "missing")); err == nil {
		t.Error("missing directory: want an error")
	}
}

func TestEnvoySectionRefusesUpstreamFieldsItLacksWithWhy(t *testing.T) {
	for _, field := range []string{"value_to_metric: true", "metadata: {}"} {
		doc := "envoy:\n  domains:\n    - domain: d\n      descriptors:\n        - key: k\n          " + field + "\n"
		_, err := Parse("t.yaml", []byte(doc))
		name, _, _ := strings.Cut(field, ":")
		want := "t.yaml:6: envoy.domains[0].descriptors[0]." + name + ": not supported: "
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: err %v, want it to start %q", name, err, want)
		}
	}
}

// share_threshold marks the entries whose values share a counter, and a
// limit that shares is a different rules version from one that does not:
// its counters are keyed differently.
func TestEnvoyShareThresholdMarksTheSharedEntries(t *testing.T) {
	doc := func(share string) string {
		return "envoy:\n  domains:\n    - domain: d\n      descriptors:\n        - key: tenant\n          value: t-*\n" + share +
			"          descriptors:\n            - key: user\n              rate_limit: { unit: minute, requests_per_unit: 2 }\n"
	}
	shared, err := Parse("t.yaml", []byte(doc("          share_threshold: true\n")))
	if err != nil {
		t.Fatal(err)
	}
	apart, err := Parse("t.yaml", []byte(doc("")))
	if err != nil {
		t.Fatal(err)
	}
	l := lookup(t, shared.Envoy(), "d", "tenant=t-9", "user=u")
	if l == nil || len(l.Shared) != 2 || l.Shared[0] != "t-*" || l.Shared[1] != "" {
		t.Fatalf("limit %+v: want Shared [t-* \"\"]", l)
	}
	if l := lookup(t, apart.Envoy(), "d", "tenant=t-9", "user=u"); l == nil || l.Shared != nil {
		t.Fatalf("limit %+v: want Shared nil without share_threshold", l)
	}
	if shared.Version() == apart.Version() {
		t.Fatal("share_threshold left the rules version as it was")
	}
}
