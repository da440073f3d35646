package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExampleIsValid(t *testing.T) {
	s := Example()
	if s.Len() != 4 {
		t.Fatalf("example has %d rules, want 4", s.Len())
	}
	r, ok := s.Get("api-per-key")
	if !ok {
		t.Fatal("api-per-key missing")
	}
	if r.Burst != 200 || r.Limit != 1000 || r.Period != time.Minute || r.Lease.Max != 100 {
		t.Fatalf("api-per-key = %+v", *r)
	}
	login, _ := s.Get("login-attempts")
	if !login.Strict || login.Failure != FailClosed || login.Leasable() {
		t.Fatalf("login-attempts must be strict, closed and not leasable: %+v", *login)
	}
}

// defaultsDoc leaves every optional field out.
const defaultsDoc = `
rules:
  - name: a
    algorithm: token_bucket
    limit: 600
    period: 1m
  - name: w
    algorithm: fixed_window
    limit: 10
    period: 500ms
`

func TestDefaults(t *testing.T) {
	s, err := Parse("t.yaml", []byte(defaultsDoc))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Get("a")
	want := LeaseTuning{Min: 1, Max: 600, TTL: 2 * time.Second, Refresh: 200 * time.Millisecond}
	if a.Burst != 600 || a.Failure != FailOpen || a.Lease != want {
		t.Fatalf("defaults of a = %+v, want burst 600, open, lease %+v", *a, want)
	}
	if got := a.Rate(); got != 10 {
		t.Fatalf("Rate() = %v, want 10", got)
	}
	w, _ := s.Get("w")
	if w.Lease.TTL != 500*time.Millisecond || w.Capacity() != 10 {
		t.Fatalf("w lease ttl %v capacity %d: want ttl capped at the period and capacity = limit", w.Lease.TTL, w.Capacity())
	}
}

// head is a valid document of one rule, which cases extend.
const head = "rules:\n  - name: r1\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n"

// errorCases are documents Parse refuses and what the error must say.
// FuzzParse starts from them too.
var errorCases = []struct {
	name, doc, want string
}{
	{"unknown field", head + "    brust: 5\n", `t.yaml:6: rule "r1": field brust: unknown field`},
	{"negative limit", "rules:\n  - name: r1\n    algorithm: token_bucket\n    limit: -1\n    period: 1s\n", `t.yaml:4: rule "r1": field limit: must not be negative`},
	{"zero limit", "rules:\n  - name: r1\n    algorithm: token_bucket\n    limit: 0\n    period: 1s\n", `t.yaml:4: rule "r1": field limit: must be between 1`},
	{"zero period", "rules:\n  - name: r1\n    algorithm: token_bucket\n    limit: 1\n    period: 0s\n", `t.yaml:5: rule "r1": field period: must be positive`},
	{"missing period", "rules:\n  - name: r1\n    algorithm: token_bucket\n    limit: 1\n", `t.yaml:2: rule "r1": field period: must be between`},
	{"bad duration", head + "    lease: { ttl: soon }\n", `t.yaml:6: rule "r1": field lease.ttl: must be a duration`},
	{"lease max above capacity", head + "    lease: { max: 11 }\n", `t.yaml:6: rule "r1": field lease.max: must be between lease.min (1) and the capacity 10`},
	{"refresh above ttl", head + "    lease: { ttl: 1s, refresh: 2s }\n", `rule "r1": field lease.refresh`},
	{"duplicate name", head + "  - name: r1\n    algorithm: fixed_window\n    limit: 1\n    period: 1s\n", `t.yaml:6: rule "r1": field name: duplicate rule name`},
	{"field twice", head + "    limit: 3\n", `t.yaml:6: rule "r1": field limit: given twice`},
	{"no name", "rules:\n  - algorithm: token_bucket\n    limit: 1\n    period: 1s\n", `t.yaml:2: rule #1: field name: is required`},
	{"bad name", "rules:\n  - name: \"a b\"\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n", `rule "a b": field name:`},
	{"unknown algorithm", "rules:\n  - name: x\n    algorithm: gcra\n    limit: 1\n    period: 1s\n", `t.yaml:3: rule "x": field algorithm: unknown algorithm "gcra"`},
	{"burst on a window", "rules:\n  - name: x\n    algorithm: fixed_window\n    limit: 5\n    period: 1s\n    burst: 9\n", `rule "x": field burst: only token_bucket`},
	{"big sliding log", "rules:\n  - name: x\n    algorithm: sliding_log\n    limit: 20000\n    period: 1s\n", `rule "x": field limit: a sliding_log keeps one entry per token`},
	{"bad failure", head + "    failure: maybe\n", `t.yaml:6: rule "r1": field failure: must be open or closed`},
	{"unknown top level", "rulez: []\n", `t.yaml:1: rulez: unknown top-level field`},
	{"empty", "", `t.yaml: rules: the file is empty`},
	{"not a list", "rules: 3\n", `t.yaml:1: rules: must be a list`},
	{"second rule unnamed", head + "  - algorithm: token_bucket\n", `t.yaml:6: rule #2: field name: is required`},
	// One document, one rules list, at least one rule: nothing in the
	// file is silently ignored, and a reload cannot make every rule
	// unknown by accident.
	{"rules twice", head + "rules:\n  - name: r2\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n", `t.yaml:6: rules: given twice`},
	{"second document", head + "---\nrules:\n  - name: r2\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n", `t.yaml:6: rules: a second YAML document`},
	{"only comments", "# no rules yet\n---\n", `t.yaml: rules: the file is empty`},
	{"empty rules", "rules: []\n", `t.yaml:1: rules: must hold at least one rule`},
	{"null rules", "rules:\n", `t.yaml:1: rules: must be a list`},
	// Syntax errors name the line of the problem, not of the block
	// around it.
	{"bad indentation", head + "   burst: 5\n", `t.yaml:6: `},
	{"list item in a rule", head + "    - burst: 5\n", `t.yaml:6: `},
	{"tab", head + "\tburst: 5\n", `t.yaml:6: `},
	{"open flow", head + "    lease: { ttl: 1s\n", `t.yaml:6: `},
	{"syntax in second document", head + "---\nrules: [\n  x: y\n", `t.yaml:8: `},
	// A field's name is quoted when it is not a plain word, and an error
	// about a whole rule names no field.
	{"rule not a mapping", "rules:\n  - 3\n", `t.yaml:2: rule #1: must be a mapping of fields`},
	{"empty field name", head + "    \"\": 5\n", `t.yaml:6: rule "r1": field "": unknown field`},
	{"field name with a newline", head + "    \"a\\nb\": 5\n", `t.yaml:6: rule "r1": field "a\nb": unknown field`},
	{"empty lease field name", head + "    lease: { \"\": 5 }\n", `t.yaml:6: rule "r1": field "lease.": unknown field`},
	{"empty top-level field", "\"\": 1\n", `t.yaml:1: "": unknown top-level field`},
}

// Every validation error names the file, the line, the rule and the field.
func TestErrorsNameFileRuleAndField(t *testing.T) {
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(c.doc))
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q\n does not contain %q", err, c.want)
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, ExampleYAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version() != Example().Version() {
		t.Fatal("the same content gave two versions")
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestVersionChangesWithContent(t *testing.T) {
	a, err := NewSet([]Rule{{Name: "a", Algorithm: TokenBucket, Limit: 1, Period: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSet([]Rule{{Name: "a", Algorithm: TokenBucket, Limit: 2, Period: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Version() == b.Version() {
		t.Fatal("different limits, same version")
	}
}

func TestProtoRoundTrip(t *testing.T) {
	want := Example()
	got, err := FromProto(want.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	if got.Version() != want.Version() {
		for i, r := range got.Rules() {
			t.Logf("got %+v\nwant %+v", *r, *want.Rules()[i])
		}
		t.Fatalf("round trip changed the set: version %s, want %s", got.Version(), want.Version())
	}
}

// Markers around the one document, and a trailing empty one, hold nothing
// to ignore.
func TestDocumentMarkers(t *testing.T) {
	for _, doc := range []string{"---\n" + head, head + "...\n", head + "---\n", head + "---\n# the end\n"} {
		s, err := Parse("t.yaml", []byte(doc))
		if err != nil || s.Len() != 1 {
			t.Errorf("%q: %v, want one rule", doc, err)
		}
	}
}

// An alias stands for the node its anchor marks, as YAML says, wherever
// it appears. (The parser once read an alias's own name as its value:
// "failure: *closed" said closed whatever the anchor held.)
func TestAliases(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`
rules:
  - name: a
    algorithm: &alg token_bucket
    limit: &n 5
    period: 1s
    failure: &closed open
    lease: &lease { min: 2, ttl: 1s }
  - name: b
    algorithm: *alg
    limit: 5
    burst: *n
    period: 1s
    failure: *closed
    lease: *lease
`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Get("b")
	want := Rule{Name: "b", Algorithm: TokenBucket, Limit: 5, Period: time.Second, Burst: 5, Failure: FailOpen,
		Lease: LeaseTuning{Min: 2, Max: 5, TTL: time.Second, Refresh: 100 * time.Millisecond}}
	if !sameRule(b, &want) {
		t.Fatalf("b = %+v, want %+v", *b, want)
	}
	// A rule given twice through an alias is a duplicate name.
	_, err = Parse("t.yaml", []byte(head+"  - &r { name: r2, algorithm: token_bucket, limit: 1, period: 1s }\n  - *r\n"))
	if err == nil || !strings.Contains(err.Error(), `rule "r2": field name: duplicate rule name`) {
		t.Fatalf("a rule repeated by an alias: %v", err)
	}
}

// An absence is a minute, or 30 TTLs when that is longer.
func TestLeaseAbsence(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{2 * time.Second, time.Minute},
		{10 * time.Second, 5 * time.Minute},
		{MaxLeaseTTL, 30 * time.Hour},
	} {
		if got := (LeaseTuning{TTL: c.ttl}).Absence(); got != c.want {
			t.Errorf("Absence with a %v TTL = %v, want %v", c.ttl, got, c.want)
		}
	}
}
