package rules

import (
	"strings"
	"testing"
)

const debtDoc = `
rules:
  - name: tb
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 200
    overrides:
      - key: big
        limit: 2000
  - name: tb-fixed
    algorithm: token_bucket
    limit: 1000
    period: 1s
    max_debt: 50
    overrides:
      - key: big
        limit: 2000
  - name: tb-none
    algorithm: token_bucket
    limit: 10
    period: 1s
    max_debt: 0
  - name: win
    algorithm: fixed_window
    limit: 100
    period: 1m
  - name: win-over
    algorithm: sliding_window
    limit: 100
    period: 1m
    max_debt: 20
`

func TestMaxDebtDefaults(t *testing.T) {
	s, err := Parse("t.yaml", []byte(debtDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rule, key string
		want      int64
	}{
		{"tb", "k", 200},        // one burst
		{"tb", "big", 400},      // the override's burst, scaled
		{"tb-fixed", "k", 50},   // the file's
		{"tb-fixed", "big", 50}, // the file's, for every key
		{"tb-none", "k", 0},
		{"win", "k", 0}, // a window never passes its limit unless told
		{"win-over", "k", 20},
	} {
		r, _ := s.Get(c.rule)
		if got := r.ForKey(c.key).Debt(); got != c.want {
			t.Errorf("%s/%s: Debt() = %d, want %d", c.rule, c.key, got, c.want)
		}
	}
}

func TestMaxDebtErrors(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"-1", `t.yaml:7: rule "r": field max_debt: must not be negative, got -1`},
		{"lots", `t.yaml:7: rule "r": field max_debt:`},
	} {
		doc := "rules:\n  - name: r\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n    burst: 5\n    max_debt: " + c.value + "\n"
		_, err := Parse("t.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("max_debt %s: err = %v, want %q", c.value, err, c.want)
		}
	}
}

// TestMaxDebtTravels: the nodes' rules carry the file's max_debt, and a
// rule without one keeps the rules version it had before the field.
func TestMaxDebtTravels(t *testing.T) {
	s, err := Parse("t.yaml", []byte(debtDoc))
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromProto(s.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tb", "tb-fixed", "tb-none", "win", "win-over"} {
		a, _ := s.Get(name)
		b, _ := back.Get(name)
		if a.Debt() != b.Debt() || (a.MaxDebt == nil) != (b.MaxDebt == nil) {
			t.Errorf("%s: Debt %d (set %v) over the wire, want %d (set %v)", name, b.Debt(), b.MaxDebt != nil, a.Debt(), a.MaxDebt != nil)
		}
	}
	if back.Version() != s.Version() {
		t.Errorf("version %s over the wire, want %s", back.Version(), s.Version())
	}
	tb, _ := s.Get("tb")
	if d := tb.digest(); strings.Contains(d, "MaxDebt") || strings.Contains(d, "max_debt") {
		t.Errorf("a rule without max_debt digests as %q: its version would change", d)
	}
	fixed, _ := s.Get("tb-fixed")
	if d := fixed.digest(); !strings.Contains(d, "max_debt:50") {
		t.Errorf("a rule with max_debt 50 digests as %q", d)
	}
}
