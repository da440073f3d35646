package rules

import (
	"strings"
	"testing"
)

func TestScope(t *testing.T) {
	doc := `rules:
  - name: g
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 100
    scope: global
  - name: r
    algorithm: token_bucket
    limit: 10
    period: 1s
    scope: regional
  - name: plain
    algorithm: fixed_window
    limit: 10
    period: 1s
`
	s, err := Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for name, global := range map[string]bool{"g": true, "r": false, "plain": false} {
		r, _ := s.Get(name)
		if r.IsGlobal() != global {
			t.Errorf("%s: IsGlobal %v, want %v", name, r.IsGlobal(), global)
		}
	}
	g, _ := s.Get("g")
	if d := g.digest(); !strings.Contains(d, "scope:global") || strings.Contains(d, "Scope:") {
		t.Errorf("a global rule digests as %q", d)
	}
	r, _ := s.Get("r")
	if d := r.digest(); strings.Contains(d, "cope") {
		t.Errorf("a regional rule digests as %q: its version would change", d)
	}
}

func TestScopeErrors(t *testing.T) {
	rule := "rules:\n  - name: x\n    limit: 10\n    period: 1s\n"
	for _, c := range []struct{ extra, want string }{
		{"    algorithm: token_bucket\n    scope: planet\n", `t.yaml:6: rule "x": field scope: must be regional or global, got "planet"`},
		{"    algorithm: token_bucket\n    scope: [global]\n", `t.yaml:6: rule "x": field scope: must be regional or global`},
		{"    algorithm: fixed_window\n    scope: global\n", `rule "x": field scope: global is for token_bucket rules only, got fixed_window`},
		{"    algorithm: token_bucket\n    strict: true\n    scope: global\n", `rule "x": field scope: global is not for strict rules`},
		{"    algorithm: token_bucket\n    scoop: global\n", `field scoop: unknown field (name, algorithm, limit, period, time_zone, burst, max_debt, max_hold, scope, failure`},
	} {
		_, err := Parse("t.yaml", []byte(rule+c.extra))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.extra, err, c.want)
		}
	}
	// A concurrency rule is refused by name too, before its own checks.
	_, err := Parse("t.yaml", []byte("rules:\n  - name: c\n    algorithm: concurrency\n    limit: 5\n    scope: global\n"))
	if err == nil || !strings.Contains(err.Error(), `rule "c": field scope: global is for token_bucket rules only, got concurrency`) {
		t.Errorf("concurrency: err = %v", err)
	}
}

// TestScopeKeepsVersion: a file without scope has the version it had
// before the field existed (the built-in rules' version then), so that
// allocators of both versions in a rolling upgrade tell their nodes one.
func TestScopeKeepsVersion(t *testing.T) {
	if v := Example().Version(); v != "17c260c8c56b" {
		t.Errorf("the built-in rules' version is %s, want 17c260c8c56b as before scope", v)
	}
	plain := "rules:\n  - name: x\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n"
	a, err := Parse("t.yaml", []byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("t.yaml", []byte(plain+"    scope: regional\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse("t.yaml", []byte(plain+"    scope: global\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Version() != b.Version() || a.Version() == g.Version() {
		t.Errorf("versions: none %s, regional %s, global %s: want the first two equal, the third apart", a.Version(), b.Version(), g.Version())
	}
}
