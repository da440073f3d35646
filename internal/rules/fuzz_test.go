package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// parseSeeds are where FuzzParse starts: the built-in example, the
// documents of the other tests, and the malformed shapes a parser meets.
func parseSeeds() []string {
	seeds := []string{string(exampleYAML), defaultsDoc, head}
	for _, c := range errorCases {
		seeds = append(seeds, c.doc)
	}
	return append(seeds,
		// Every field, and the extremes each may take.
		"rules:\n  - name: all\n    algorithm: token_bucket\n    limit: 1099511627776\n    period: 8784h\n    burst: 1099511627776\n    failure: closed\n    strict: true\n    lease: { min: 1, max: 1099511627776, ttl: 1h, refresh: 1ms }\n",
		"rules:\n  - name: fast\n    algorithm: token_bucket\n    limit: 1000\n    period: 1ms\n    lease: { ttl: 1ms }\n",
		"rules:\n  - name: log\n    algorithm: sliding_log\n    limit: 10000\n    period: 1ms\n",
		"rules: [{name: a, algorithm: fixed_window, limit: 1, period: 1s}, {name: b, algorithm: sliding_window, limit: 2, period: 2s}]\n",
		// Numbers beyond every bound and beyond int64.
		"rules:\n  - name: big\n    algorithm: token_bucket\n    limit: 99999999999999999999\n    period: 1s\n",
		"rules:\n  - name: big\n    algorithm: token_bucket\n    limit: 1099511627777\n    period: 1s\n",
		"rules:\n  - name: big\n    algorithm: token_bucket\n    limit: 1\n    period: 9223372036854775807ns\n",
		"rules:\n  - name: big\n    algorithm: token_bucket\n    limit: 1\n    period: 99999999999h\n",
		"rules:\n  - name: n\n    algorithm: token_bucket\n    limit: 1e3\n    period: 1s\n    burst: 0x10\n",
		"rules:\n  - name: n\n    algorithm: token_bucket\n    limit: +5\n    period: -1s\n",
		// Duplicate keys, at every level.
		"rules:\n  - name: a\n    name: b\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n",
		head+"    lease: { ttl: 1s, ttl: 2s }\n",
		head+"rules: []\n",
		// Several documents.
		head+"---\n"+head,
		"---\n---\n"+head+"...\n---\n",
		"%YAML 1.2\n---\n"+head,
		// Anchors, aliases and merge keys.
		"rules:\n  - &r\n    name: a\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n  - *r\n",
		"rules:\n  - name: &tb token_bucket\n    algorithm: *tb\n    limit: 1\n    period: 1s\n",
		"base: &b { algorithm: token_bucket, limit: 1, period: 1s }\nrules:\n  - name: a\n    <<: *b\n",
		"rules:\n  - name: a\n    algorithm: token_bucket\n    limit: &n 5\n    burst: *n\n    period: 1s\n    lease: &l { min: 1 }\n  - name: b\n    algorithm: token_bucket\n    limit: 5\n    period: 1s\n    lease: *l\n",
		"rules: *nowhere\n",
		billionLaughs("rules: *i\n"),
		billionLaughs("rules:\n  - name: a\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n    lease: *i\n"),
		// Shapes that are not rules at all.
		"", "~", "null", "[]", "{}", "rules: ~", "rules: {}", "rules: [[]]", "rules: [1]", "rules: [~]",
		"- rules\n", "rules:\n  - !!binary aGVsbG8=\n", "rules: !!str x\n", `"": 1`+"\n",
		"rules:\n  - name: a\n    \"\": 1\n", "rules:\n  - name: a\n    lease: []\n", "rules:\n  - name: a\n    lease: { \"\": 1 }\n",
		"rules:\n  - name: \"a\\nb\"\n    algorithm: token_bucket\n", "rules:\n  - name: null\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n",
		"rules:\n  - name: a\n    strict: [true]\n    failure: {open: 1}\n    algorithm: [token_bucket]\n",
		"\ufeff"+head, head+"\t# tab\n", "rules:\n  - name: a\xff\n", "rules: ["+strings.Repeat("[", 200)+"\n",
		"? [a, b]\n: c\n", "rules:\n  ? name\n  : a\n", "!!map {rules: !!seq []}\n",
	)
}

// billionLaughs prefixes doc with nine anchors, each a list of nine
// aliases to the one before: expanded, *i is 9^9 strings.
func billionLaughs(doc string) string {
	var b strings.Builder
	b.WriteString(`x: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]` + "\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		b.WriteString("x" + name + ": &" + name + " [")
		for j := range 9 {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
		prev = name
	}
	return b.String() + doc
}

// FuzzParse: Parse never panics; every error names the file (a
// *FieldError names the field too); every set it accepts holds only rules
// within Normalize's bounds, and survives the wire (ToProto, protobuf
// encoding, FromProto) unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz.yaml"
		set, err := Parse(file, data)
		if err != nil {
			checkParseError(t, file, err)
			return
		}
		if set.Len() == 0 {
			t.Fatal("accepted a set with no rule")
		}
		for _, r := range set.Rules() {
			checkBounds(t, r)
		}
		checkRoundTrip(t, set)
		again, err := Parse(file, data)
		if err != nil || again.Version() != set.Version() {
			t.Fatalf("parsed twice: version %s, then %v, %v", set.Version(), again, err)
		}
	})
}

// checkParseError: a *FieldError names the file and the field, or is about
// a whole rule; any other error starts with the file's name. Either is one
// line.
func checkParseError(t *testing.T, file string, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, file) {
		t.Fatalf("error %q does not start with the file name", msg)
	}
	if strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("error %q is not one line", msg)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		if fe.File != file {
			t.Fatalf("FieldError %q: File %q, want %q", msg, fe.File, file)
		}
		if fe.Field == "" && fe.Rule == "" {
			t.Fatalf("FieldError %q names neither a field nor a rule", msg)
		}
		if strings.Contains(msg, "field :") {
			t.Fatalf("FieldError %q has an empty field name", msg)
		}
	}
}

// checkBounds: what Normalize promises of a rule it accepts.
func checkBounds(t *testing.T, r *Rule) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("rule %+v: "+format, append([]any{*r}, args...)...)
	}
	if err := checkName(r.Name); err != nil {
		fail("name: %v", err)
	}
	if _, ok := algorithmNames[r.Algorithm]; !ok {
		fail("algorithm")
	}
	if r.Limit < 1 || r.Limit > MaxLimit {
		fail("limit out of [1, %d]", MaxLimit)
	}
	if r.Period < MinPeriod || r.Period > MaxPeriod {
		fail("period out of [%v, %v]", MinPeriod, MaxPeriod)
	}
	if r.Burst < 1 || r.Burst > MaxLimit || r.Algorithm != TokenBucket && r.Burst != r.Limit {
		fail("burst")
	}
	if r.Rate() > float64(MaxLimit) {
		fail("rate %g above %d", r.Rate(), MaxLimit)
	}
	if r.Failure != FailOpen && r.Failure != FailClosed {
		fail("failure")
	}
	if r.Algorithm == SlidingLog && (!r.Strict || r.Limit > MaxSlidingLog || r.Leasable()) {
		fail("a sliding log must be strict and small")
	}
	l := r.Lease
	if l.Min < 1 || l.Min > l.Max || l.Max > r.Capacity() {
		fail("lease.min, lease.max out of [1, capacity %d]", r.Capacity())
	}
	if l.TTL < minLeaseDuration || l.TTL > MaxLeaseTTL {
		fail("lease.ttl out of [%v, %v]", minLeaseDuration, MaxLeaseTTL)
	}
	if l.Refresh < minLeaseDuration || l.Refresh > l.TTL {
		fail("lease.refresh out of [%v, lease.ttl]", minLeaseDuration)
	}
	again := *r
	if err := again.Normalize(); err != nil || !sameRule(&again, r) {
		fail("normalized twice: %+v, %v", again, err)
	}
}

// sameRule compares two rules and their overrides' rules by what they say.
func sameRule(a, b *Rule) bool {
	plain := func(r *Rule) Rule {
		c := *r
		c.keyed, c.base = nil, nil
		return c
	}
	if !reflect.DeepEqual(plain(a), plain(b)) {
		return false
	}
	for _, o := range a.Overrides {
		key := o.Key
		if key == "" {
			key = strings.ReplaceAll(o.Match, "*", "x")
		}
		if !reflect.DeepEqual(plain(a.ForKey(key)), plain(b.ForKey(key))) {
			return false
		}
	}
	return true
}

// checkRoundTrip sends set the way GetRules does and reads it back.
func checkRoundTrip(t *testing.T, set *Set) {
	t.Helper()
	pb := set.ToProto()
	if pb.GetVersion() != set.Version() {
		t.Fatalf("ToProto version %q, want %q", pb.GetVersion(), set.Version())
	}
	wire, err := proto.Marshal(pb)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back allotv1.GetRulesResponse
	if err := proto.Unmarshal(wire, &back); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	got, err := FromProto(&back)
	if err != nil {
		t.Fatalf("FromProto refused what Parse accepted: %v", err)
	}
	if got.Version() != set.Version() || got.Len() != set.Len() {
		t.Fatalf("round trip: version %s with %d rules, want %s with %d", got.Version(), got.Len(), set.Version(), set.Len())
	}
	for i, r := range got.Rules() {
		if want := set.Rules()[i]; !sameRule(r, want) {
			t.Fatalf("round trip of rule %d: %+v, want %+v", i, *r, *want)
		}
	}
}

// A "billion laughs" document is refused, quickly and in little memory:
// the parser reads yaml.Nodes, which hold an alias as a pointer to its
// anchor, and never expands one.
func TestBillionLaughs(t *testing.T) {
	for _, doc := range []string{
		billionLaughs("rules: *i\n"),
		billionLaughs("rules:\n  - *i\n"),
		billionLaughs("rules:\n  - name: a\n    algorithm: token_bucket\n    limit: 1\n    period: 1s\n    lease: *i\n"),
		billionLaughs("rules:\n  - name: a\n    algorithm: token_bucket\n    limit: *i\n    period: 1s\n"),
	} {
		start := time.Now()
		allocated := testing.AllocsPerRun(1, func() {
			if _, err := Parse("laughs.yaml", []byte(doc)); err == nil {
				t.Errorf("accepted %q", doc)
			}
		})
		if allocated > 100_000 {
			t.Errorf("%d allocations to refuse a billion laughs", int(allocated))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v to refuse a billion laughs", d)
		}
	}
}

// FuzzParseFields writes one rule from fuzzed fields, in YAML and as a
// Rule, so that the fuzzer reaches Normalize's bounds with numbers a
// random document seldom holds. Both must agree, and what they accept must
// pass checkBounds and the round trip.
func FuzzParseFields(f *testing.F) {
	f.Add("api", uint8(0), int64(1000), int64(time.Minute), int64(200), false, true, int64(1), int64(100), int64(2*time.Second), int64(0))
	f.Add("w", uint8(1), int64(10), int64(500*time.Millisecond), int64(0), false, false, int64(0), int64(0), int64(0), int64(0))
	f.Add("log", uint8(3), int64(MaxSlidingLog), int64(MinPeriod), int64(0), true, false, int64(0), int64(0), int64(0), int64(0))
	f.Add("max", uint8(0), MaxLimit, int64(MaxPeriod), MaxLimit, true, true, int64(1), MaxLimit, int64(MaxLeaseTTL), int64(time.Millisecond))
	f.Add("fast", uint8(0), MaxLimit, int64(time.Second), int64(1), false, false, int64(1), int64(1), int64(time.Millisecond), int64(time.Millisecond))
	f.Add("over", uint8(0), MaxLimit+1, int64(MaxPeriod+1), int64(-1), false, true, int64(-1), int64(-1), int64(MaxLeaseTTL+1), int64(-1))
	f.Add("", uint8(7), int64(0), int64(0), int64(0), false, false, int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, name string, alg uint8, limit, period, burst int64, closed, strict bool,
		leaseMin, leaseMax, ttl, refresh int64) {
		r := Rule{Name: name, Algorithm: Algorithm(alg%5 + 1), Limit: limit, Period: time.Duration(period),
			Burst: burst, Failure: FailOpen, Strict: strict,
			Lease: LeaseTuning{Min: leaseMin, Max: leaseMax, TTL: time.Duration(ttl), Refresh: time.Duration(refresh)}}
		if closed {
			r.Failure = FailClosed
		}
		var doc strings.Builder
		fmt.Fprintf(&doc, "rules:\n  - name: %s\n    algorithm: %s\n    limit: %d\n    period: %s\n    burst: %d\n",
			strconv.Quote(name), r.Algorithm, limit, r.Period, burst)
		fmt.Fprintf(&doc, "    failure: %s\n    strict: %t\n    lease: { min: %d, max: %d, ttl: %s, refresh: %s }\n",
			r.Failure, strict, leaseMin, leaseMax, r.Lease.TTL, r.Lease.Refresh)
		fromYAML, yamlErr := Parse("fuzz.yaml", []byte(doc.String()))
		if yamlErr != nil {
			checkParseError(t, "fuzz.yaml", yamlErr)
		}
		direct, err := NewSet([]Rule{r})
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("NewSet: %v is not a FieldError naming a field", err)
			}
			if yamlErr == nil {
				t.Fatalf("NewSet refused %+v (%v), Parse accepted\n%s", r, err, doc.String())
			}
			return
		}
		checkBounds(t, direct.Rules()[0])
		checkRoundTrip(t, direct)
		// A file has no zero durations: where the Rule held one, NewSet
		// took it as "the default" and Parse refuses it. Nothing else may
		// differ.
		if yamlErr != nil && ttl != 0 && refresh != 0 {
			t.Fatalf("Parse refused %+v (%v), NewSet accepted", r, yamlErr)
		}
		if yamlErr == nil && fromYAML.Version() != direct.Version() {
			t.Fatalf("Parse and NewSet disagree: %+v and %+v", *fromYAML.Rules()[0], *direct.Rules()[0])
		}
	})
}
