package rules

import (
	"strings"
	"testing"
	"time"
)

// The examples of envoyproxy/ratelimit's README, as one envoy section.
const envoyExamples = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 10
    period: 1s
envoy:
  headers: x-ratelimit
  domains:
    - domain: messaging           # example 2: nested descriptors
      descriptors:
        - key: message_type
          value: marketing
          descriptors:
            - key: to_number
              rate_limit: { unit: day, requests_per_unit: 5 }
        - key: to_number
          rate_limit: { unit: day, requests_per_unit: 100 }
    - domain: edge_proxy_per_ip   # example 3: a value-specific override
      descriptors:
        - key: remote_address
          rate_limit: { unit: second, requests_per_unit: 10 }
        - key: remote_address
          value: 50.0.0.5
          rate_limit: { unit: second, requests_per_unit: 0 }
    - domain: example4            # example 4: depth must match
      descriptors:
        - key: key
          value: value
          rate_limit: { requests_per_unit: 300, unit: second }
    - domain: internal            # example 5: unlimited
      algorithm: token_bucket
      descriptors:
        - key: ldap
          rate_limit: { unlimited: true }
        - key: azure
          rate_limit: { unit: minute, requests_per_unit: 100 }
    - domain: example6            # example 6: shadow mode
      descriptors:
        - key: service
          descriptors:
            - key: user
              value: user-a
              rate_limit: { requests_per_unit: 10, unit: second }
              shadow_mode: true
            - key: user
              value: user-b
              rate_limit: { requests_per_unit: 20, unit: second }
    - domain: example7            # example 7: replaces
      descriptors:
        - key: key_1
          value: value_1
          descriptors:
            - key: user
              value: bkthomps
              rate_limit: { name: specific_limit, requests_per_unit: 5, unit: second }
        - key: key_2
          value: value_2
          descriptors:
            - key: user
              value: bkthomps
              rate_limit:
                replaces: [ { name: specific_limit } ]
                requests_per_unit: 10
                unit: second
    - domain: example9            # example 9: a value prefix
      descriptors:
        - key: key1
          value: value*
          detailed_metric: true
          rate_limit: { unit: minute, requests_per_unit: 20, unit_multiplier: 5, algorithm: sliding_window }
`

// lookup finds the limit of a descriptor given as "k=v", "k=v", ...
func lookup(t *testing.T, e *Envoy, domain string, entries ...string) *EnvoyLimit {
	t.Helper()
	d, ok := e.Domain(domain)
	if !ok {
		t.Fatalf("domain %q missing", domain)
	}
	return d.Lookup(len(entries), func(i int) (string, string) {
		k, v, _ := strings.Cut(entries[i], "=")
		return k, v
	})
}

func TestEnvoySectionFollowsRatelimitExamples(t *testing.T) {
	s, err := Parse("t.yaml", []byte(envoyExamples))
	if err != nil {
		t.Fatal(err)
	}
	e := s.Envoy()
	if e == nil || e.Headers != EnvoyHeadersXRateLimit || len(e.Domains()) != 7 {
		t.Fatalf("envoy section %+v", e)
	}
	if s.Len() != 1 {
		t.Fatalf("the envoy section's limits must not join the rules: %d rules", s.Len())
	}
	type want struct {
		rpu       uint32
		unit      EnvoyUnit
		alg       Algorithm // 0: no rule
		unlimited bool
		shadow    bool
	}
	cases := []struct {
		domain  string
		entries []string
		want    *want
	}{
		{"messaging", []string{"message_type=marketing", "to_number=2061111111"}, &want{5, EnvoyDay, FixedWindow, false, false}},
		{"messaging", []string{"to_number=2061111111"}, &want{100, EnvoyDay, FixedWindow, false, false}},
		{"messaging", []string{"message_type=marketing"}, nil}, // a level on the way, no limit of its own
		{"messaging", []string{"message_type=transactional", "to_number=1"}, nil},
		{"edge_proxy_per_ip", []string{"remote_address=50.0.0.1"}, &want{10, EnvoySecond, FixedWindow, false, false}},
		{"edge_proxy_per_ip", []string{"remote_address=50.0.0.5"}, &want{0, EnvoySecond, 0, false, false}}, // the value wins over the key
		{"example4", []string{"key=value", "subkey=subvalue"}, nil},                                        // more entries than levels
		{"example4", []string{"key=value"}, &want{300, EnvoySecond, FixedWindow, false, false}},
		{"internal", []string{"ldap=x"}, &want{0, 0, 0, true, false}},
		{"internal", []string{"azure=x"}, &want{100, EnvoyMinute, TokenBucket, false, false}}, // the domain's algorithm
		{"example6", []string{"service=auth", "user=user-a"}, &want{10, EnvoySecond, FixedWindow, false, true}},
		{"example6", []string{"service=auth", "user=user-b"}, &want{20, EnvoySecond, FixedWindow, false, false}},
		{"example6", []string{"service=auth", "user=user-c"}, nil},
		{"example9", []string{"key1=value_1"}, &want{20, EnvoyMinute, SlidingWindow, false, false}},
		{"example9", []string{"key1=valu"}, nil},
	}
	for _, c := range cases {
		l := lookup(t, e, c.domain, c.entries...)
		switch {
		case c.want == nil && l == nil:
			continue
		case c.want == nil:
			t.Errorf("%s %v: got limit %+v, want none", c.domain, c.entries, *l)
			continue
		case l == nil:
			t.Errorf("%s %v: no limit, want %+v", c.domain, c.entries, *c.want)
			continue
		}
		got := want{l.RequestsPerUnit, l.Unit, 0, l.Unlimited, l.Shadow}
		if l.Rule != nil {
			got.alg = l.Rule.Algorithm
			if l.Rule.Limit != int64(l.RequestsPerUnit) || l.Rule.Period != l.Period() || l.Rule.Name != l.ID {
				t.Errorf("%s %v: rule %+v does not match the limit %+v", c.domain, c.entries, *l.Rule, *l)
			}
		}
		if got != *c.want {
			t.Errorf("%s %v: got %+v, want %+v", c.domain, c.entries, got, *c.want)
		}
	}
	w := lookup(t, e, "example9", "key1=value_1")
	if w.UnitMultiplier != 5 || w.Period() != 5*time.Minute {
		t.Errorf("example9 period %v (multiplier %d), want 5m", w.Period(), w.UnitMultiplier)
	}
	r := lookup(t, e, "example7", "key_2=value_2", "user=bkthomps")
	if len(r.Replaces) != 1 || r.Replaces[0] != "specific_limit" {
		t.Errorf("example7 replaces %v", r.Replaces)
	}
}

// Generated names are valid rule names, at most 64 bytes, the same on
// every parse, and distinct for distinct descriptors and periods.
func TestEnvoyRuleNames(t *testing.T) {
	a, err := Parse("t.yaml", []byte(envoyExamples))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Parse("t.yaml", []byte(envoyExamples))
	l1 := lookup(t, a.Envoy(), "messaging", "message_type=marketing", "to_number=1")
	l2 := lookup(t, b.Envoy(), "messaging", "message_type=marketing", "to_number=2")
	if l1.ID != l2.ID || !strings.HasPrefix(l1.ID, "envoy.messaging.message_type_marketing.to_number.") {
		t.Fatalf("names %q and %q: want one deterministic name", l1.ID, l2.ID)
	}
	long := strings.Repeat("x", 300)
	names := map[string]bool{}
	for _, n := range []string{
		EnvoyRuleName("d", "", []EnvoyEntry{{Key: "k", Value: "v"}}, time.Second),
		EnvoyRuleName("d", "", []EnvoyEntry{{Key: "k", Value: "v"}}, time.Minute), // another unit: another rule
		EnvoyRuleName("d", "", []EnvoyEntry{{Key: "k", Value: "w"}}, time.Second),
		EnvoyRuleName("d", "", []EnvoyEntry{{Key: "k"}}, time.Second),
		EnvoyRuleName("d", "override", []EnvoyEntry{{Key: "k"}}, time.Second),
		EnvoyRuleName(long, "", []EnvoyEntry{{Key: "a b/c", Value: "ü*"}}, time.Second),
		EnvoyRuleName(long, "", []EnvoyEntry{{Key: "a b/c", Value: "ü"}}, time.Second),
		EnvoyRuleName("日本", "", []EnvoyEntry{{Key: long, Value: long}, {Key: "k"}}, time.Hour),
	} {
		if err := ValidName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
		if names[n] {
			t.Errorf("%q made twice", n)
		}
		names[n] = true
	}
}

// A file without an envoy section has the version it had before the
// section existed; adding one changes it, and so does changing a limit.
func TestEnvoySectionAndVersions(t *testing.T) {
	const head = "rules:\n  - name: a\n    algorithm: token_bucket\n    limit: 5\n    period: 1s\n"
	plain, err := Parse("t.yaml", []byte(head))
	if err != nil {
		t.Fatal(err)
	}
	same, err := NewSet([]Rule{{Name: "a", Algorithm: TokenBucket, Limit: 5, Period: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Envoy() != nil || plain.Version() != same.Version() {
		t.Fatalf("without an envoy section: envoy %v, version %s, want nil and %s", plain.Envoy(), plain.Version(), same.Version())
	}
	section := func(rpu string) string {
		return "envoy:\n  domains:\n    - domain: d\n      descriptors:\n        - key: k\n          rate_limit: { unit: second, requests_per_unit: " + rpu + " }\n"
	}
	with5, err := Parse("t.yaml", []byte(head+section("5")))
	if err != nil {
		t.Fatal(err)
	}
	with6, _ := Parse("t.yaml", []byte(head+section("6")))
	if with5.Version() == plain.Version() || with5.Version() == with6.Version() {
		t.Fatalf("versions %s, %s, %s: the envoy section must change the version", plain.Version(), with5.Version(), with6.Version())
	}
	only, err := Parse("t.yaml", []byte(section("5")))
	if err != nil {
		t.Fatalf("an envoy section without rules: %v", err)
	}
	if only.Len() != 0 || only.Envoy() == nil {
		t.Fatalf("envoy-only file: %d rules, envoy %v", only.Len(), only.Envoy())
	}
}

// Errors name the file, the line, the rule made for the limit when it is
// known, and the field by its path.
func TestEnvoyErrorsNameFileLineAndField(t *testing.T) {
	doc := func(desc string) string {
		return "rules:\n  - name: a\n    algorithm: token_bucket\n    limit: 5\n    period: 1s\n" +
			"envoy:\n  domains:\n    - domain: d\n      descriptors:\n" + desc
	}
	// The descriptor starts on line 10.
	cases := []struct{ name, doc, want string }{
		{"unknown unit", doc("        - key: k\n          rate_limit: { unit: fortnight, requests_per_unit: 5 }\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
		{"no unit", doc("        - key: k\n          rate_limit: { requests_per_unit: 5 }\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].rate_limit.unit: is required`},
		{"no requests_per_unit", doc("        - key: k\n          rate_limit: { unit: second }\n"),
			`envoy.domains[0].descriptors[0].rate_limit.requests_per_unit: is required`},
		{"negative", doc("        - key: k\n          rate_limit: { unit: second, requests_per_unit: -1 }\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, got "-1"`},
		{"unknown field", doc("        - key: k\n          rate_limt: { unit: second, requests_per_unit: 1 }\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].rate_limt: unknown field`},
		{"no key", doc("        - value: v\n"), `t.yaml:10: envoy.domains[0].descriptors[0].key: is required`},
		{"duplicate", doc("        - key: k\n          value: v\n        - key: k\n          value: v\n"),
			`t.yaml:12: envoy.domains[0].descriptors[1]: descriptor "k=v" is given twice at this level (also at line 10)`},
		{"unlimited with a unit", doc("        - key: k\n          rate_limit: { unlimited: true, unit: second }\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].rate_limit.unit: an unlimited rate_limit has no unit`},
		{"shadow without a limit", doc("        - key: k\n          shadow_mode: true\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].shadow_mode: applies to a rate_limit`},
		{"replaces nothing", doc("        - key: k\n          rate_limit:\n            unit: second\n            requests_per_unit: 1\n            replaces: [ { name: nope } ]\n"),
			`t.yaml:14: rule "envoy.d.k.`},
		{"replaces nothing, field", doc("        - key: k\n          rate_limit:\n            unit: second\n            requests_per_unit: 1\n            replaces: [ { name: nope } ]\n"),
			`field envoy.domains[0].descriptors[0].rate_limit.replaces[0].name: no rate_limit of domain "d" is named "nope"`},
		{"big sliding log", doc("        - key: k\n          rate_limit: { unit: second, requests_per_unit: 20000, algorithm: sliding_log }\n"),
			`field envoy.domains[0].descriptors[0].rate_limit.requests_per_unit: a sliding_log keeps one entry per token`},
		{"period too long", doc("        - key: k\n          rate_limit: { unit: year, requests_per_unit: 1, unit_multiplier: 2 }\n"),
			`t.yaml:11: envoy.domains[0].descriptors[0].rate_limit.unit_multiplier: must be a whole number from 1 to 1`},
		{"nested", doc("        - key: k\n          descriptors:\n            - key: j\n              rate_limit: { unit: hour, requests_per_unit: x }\n"),
			`t.yaml:13: envoy.domains[0].descriptors[0].descriptors[0].rate_limit.requests_per_unit: must be a whole number`},
		{"bad algorithm", doc("        - key: k\n          rate_limit: { unit: second, requests_per_unit: 1, algorithm: gcra }\n"),
			`envoy.domains[0].descriptors[0].rate_limit.algorithm: unknown algorithm "gcra"`},
		{"bad headers", "envoy:\n  headers: draft99\n  domains: []\n", `t.yaml:2: envoy.headers: must be none, x-ratelimit or ratelimit`},
		{"no domains", "envoy:\n  headers: none\n", `t.yaml:2: envoy.domains: missing`},
		{"empty domain", "envoy:\n  domains:\n    - descriptors: []\n", `t.yaml:3: envoy.domains[0].domain: is required`},
		{"duplicate domain", "envoy:\n  domains:\n    - domain: d\n    - domain: d\n", `t.yaml:4: envoy.domains[1].domain: domain "d" is given twice (also at line 3)`},
		{"envoy twice", "envoy:\n  domains: [ { domain: d } ]\nenvoy:\n  domains: [ { domain: e } ]\n", `t.yaml:3: envoy: given twice`},
		{"no rules and no envoy", "{}\n", `rules: missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// A generated name that a rule of the file already has is an error: the
// two would share their state in the store.
func TestEnvoyNameTakenByARule(t *testing.T) {
	name := EnvoyRuleName("d", "", []EnvoyEntry{{Key: "k"}}, time.Second)
	doc := "rules:\n  - name: " + name + "\n    algorithm: token_bucket\n    limit: 5\n    period: 1s\n" +
		"envoy:\n  domains:\n    - domain: d\n      descriptors:\n        - key: k\n          rate_limit: { unit: second, requests_per_unit: 1 }\n"
	_, err := Parse("t.yaml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), "has the name of a rule in 'rules'") {
		t.Fatalf("error %v", err)
	}
}

// An alias in the envoy section stands for its anchored node, as it does
// in the rules list.
func TestEnvoyAliases(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`
envoy:
  domains:
    - domain: d
      descriptors:
        - key: a
          rate_limit: &daily { unit: day, requests_per_unit: 7 }
        - &b
          key: b
          rate_limit: *daily
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a=1", "b=1"} {
		if l := lookup(t, s.Envoy(), "d", k); l == nil || l.RequestsPerUnit != 7 || l.Unit != EnvoyDay {
			t.Fatalf("%s: limit %+v, want 7 a day", k, l)
		}
	}
}

// A version is a digest of the rules' meaning: one file parsed again (a
// restart, a SIGHUP, another allocator) gives the same one. The envoy
// section's digest once printed its limits' rule pointers, and each parse
// gave a new version: nodes balanced over two allocators re-applied rules
// and called GetRules every few seconds.
func TestVersionIsStableAcrossParses(t *testing.T) {
	first, err := Parse("t.yaml", []byte(envoyExamples))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		again, err := Parse("t.yaml", []byte(envoyExamples))
		if err != nil {
			t.Fatal(err)
		}
		if again.Version() != first.Version() {
			t.Fatalf("parse %d: version %s, the first %s: the same file must give the same version", i+2, again.Version(), first.Version())
		}
	}
}

// A '*' stands for any run of characters wherever it is in a value, as in
// envoyproxy/ratelimit (its wildcard.yaml's midWild "bar*b"), and with the
// one matcher the rules' overrides use. Exact values win over patterns,
// patterns are tried in file order, and the key alone comes last. Such
// values once loaded and matched only themselves: silently unlimited.
func TestEnvoyWildcardsAnywhere(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`
envoy:
  domains:
    - domain: d
      descriptors:
        - key: path
          value: /api/*/action
          rate_limit: { unit: minute, requests_per_unit: 1 }
        - key: path
          value: /api/v1/action
          rate_limit: { unit: minute, requests_per_unit: 2 }
        - key: path
          value: /api/*
          rate_limit: { unit: minute, requests_per_unit: 3 }
        - key: path
          rate_limit: { unit: minute, requests_per_unit: 4 }
        - key: midWild
          value: bar*b
          rate_limit: { unit: minute, requests_per_unit: 5 }
        - key: many
          value: foo*bar*baz
          descriptors:
            - key: host
              value: "*.example.com"
              rate_limit: { unit: minute, requests_per_unit: 6 }
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		entries []string
		rpu     uint32 // 0: no limit
	}{
		{[]string{"path=/api/v2/action"}, 1},
		{[]string{"path=/api//action"}, 1},     // '*' may stand for nothing
		{[]string{"path=/api/v1/action"}, 2},   // the exact value wins over a pattern
		{[]string{"path=/api/v2/action/x"}, 3}, // the first pattern misses, the second matches
		{[]string{"path=/other"}, 4},           // the key alone
		{[]string{"midWild=barb"}, 5},          //
		{[]string{"midWild=bar-x-b"}, 5},       //
		{[]string{"midWild=bar*b"}, 5},         // the literal, as before
		{[]string{"midWild=bar-x-bc"}, 0},      // must end in b
		{[]string{"midWild=xbarb"}, 0},         // must begin with bar
		{[]string{"many=foo1bar2baz", "host=a.example.com"}, 6},
		{[]string{"many=foobarbaz", "host=.example.com"}, 6},
		{[]string{"many=foo1baz2bar", "host=a.example.com"}, 0},
		{[]string{"many=foo1bar2baz", "host=example.com"}, 0},
	}
	for _, c := range cases {
		l := lookup(t, s.Envoy(), "d", c.entries...)
		got := uint32(0)
		if l != nil {
			got = l.RequestsPerUnit
		}
		if got != c.rpu {
			t.Errorf("%v: the limit of %d a minute, want %d (0: none)", c.entries, got, c.rpu)
		}
	}
}
