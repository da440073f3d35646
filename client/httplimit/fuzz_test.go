package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/allot-dev/allot/client"
)

// fuzzClient is a node with no allocator and the rules the fuzzers name:
// "r" holds one token, so a cost of 2 is refused before anything is
// spent, right after the key has been checked.
func fuzzClient(f *testing.F) *client.Client {
	c, err := client.New(client.Config{Logger: slog.New(slog.DiscardHandler), Rules: []client.Rule{
		{Name: "r", Algorithm: "token_bucket", Limit: 1, Period: time.Hour},
		{Name: "big", Algorithm: "token_bucket", Limit: 1 << 40, Period: 366 * 24 * time.Hour},
		{Name: "fast", Algorithm: "fixed_window", Limit: 7, Period: 1500 * time.Microsecond},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	return c
}

// FuzzKey: whatever the request holds, its key is one the SDK accepts,
// comes from the first source present (API-key header, identity, client
// IP), keeps the value when it fits and hashes it when not; the client IP
// is a canonical address when there is one, and with TrustProxy only the
// last X-Forwarded-For entry counts, so what a client writes before it
// cannot choose the key.
func FuzzKey(f *testing.F) {
	c := fuzzClient(f)
	f.Add("X-API-Key", "k1", "alice", true, false, "192.0.2.1:5000", "", "")
	f.Add("X-API-Key", "", "alice", true, false, "192.0.2.1:5000", "", "")
	f.Add("", "", "", false, false, "[2001:db8::1%eth0]:443", "", "")
	f.Add("", "", "", false, false, "[::ffff:192.0.2.1]:443", "", "")
	f.Add("", "", "", false, false, "", "", "")
	f.Add("", "", "", false, false, "not an address", "", "")
	f.Add("", "", "", false, true, "10.0.0.2:5000", "198.51.100.1, 203.0.113.7", "")
	f.Add("", "", "", false, true, "10.0.0.2:5000", "198.51.100.1", "203.0.113.7 ,")
	f.Add("", "", "", false, true, "10.0.0.2:5000", "[2001:db8::7]:1234", "")
	f.Add("", "", "", false, true, "10.0.0.2:5000", "203.0.113.7, unknown", "")
	f.Add("", "", "", false, true, "10.0.0.2:5000", "fe80::1%eth0, ::ffff:1.2.3.4", ",,")
	f.Add("", "", "", false, true, "10.0.0.2:5000", "1.2.3.4:99999", "1.2.3.4%x")
	f.Add("X-Forwarded-For", "1.2.3.4", "", false, true, "10.0.0.2:5000", "5.6.7.8", "")
	f.Add("x-api-key", strings.Repeat("x", 508), "", false, false, "", "", "")
	f.Add("x-api-key", strings.Repeat("x", 509), "", false, false, "", "", "")
	f.Add("x-api-key", "bad\xff\xfekey", "", false, false, "", "", "")
	f.Add("", "", "al\xffice", true, false, "192.0.2.1:5000", "", "")
	f.Add("", "", strings.Repeat("é", 255), true, false, "192.0.2.1:5000", "", "")
	f.Add("bad header", "v", "", true, false, "\xff:1", "", "")
	f.Fuzz(func(t *testing.T, header, apiKey, identity string, hasIdentity, trustProxy bool, remote, xff1, xff2 string) {
		m, err := New(c, Options{Policies: []Policy{{Rule: "r"}}, KeyHeader: header, TrustProxy: trustProxy,
			Identity: func(*http.Request) (string, bool) { return identity, hasIdentity }})
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Header: http.Header{}, RemoteAddr: remote}
		if header != "" {
			r.Header[textproto.CanonicalMIMEHeaderKey(header)] = []string{apiKey}
		}
		for _, v := range []string{xff1, xff2} {
			if v != "" {
				r.Header.Add("X-Forwarded-For", v)
			}
		}
		key := m.key(r)
		checkKey(t, c, key)

		apiValue := ""
		if header != "" {
			apiValue = r.Header.Get(header)
		}
		switch {
		case apiValue != "":
			checkSource(t, key, "key:", apiValue)
		case hasIdentity && identity != "":
			checkSource(t, key, "id:", identity)
		default:
			checkClientIP(t, m, r, key)
		}
	})
}

func checkKey(t *testing.T, c *client.Client, key string) {
	t.Helper()
	if len(key) < 1 || len(key) > 512 || !utf8.ValidString(key) {
		t.Fatalf("key %q: not 1 to 512 bytes of UTF-8", key)
	}
	if _, err := c.AllowN(context.Background(), "r", key, 2); !errors.Is(err, client.ErrCostAboveCapacity) {
		t.Fatalf("key %q: the SDK answers %v, want it past the key's check", key, err)
	}
}

var hashed = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// checkSource: the key is prefix and the value itself when that fits,
// else prefix and the value's hash.
func checkSource(t *testing.T, key, prefix, value string) {
	t.Helper()
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		t.Fatalf("key %q for %q: want the prefix %q", key, value, prefix)
	}
	fits := len(prefix)+len(value) <= 512 && utf8.ValidString(value)
	if fits && rest != value || !fits && !hashed.MatchString(rest) {
		t.Fatalf("key %q for %q: want the value itself when it fits, else its hash", key, value)
	}
}

// checkClientIP: the IP key is a canonical address, or "unknown", or the
// connection's own text when it is not an address; with TrustProxy, the
// last X-Forwarded-For entry decides and nothing before it counts;
// without, the header is ignored.
func checkClientIP(t *testing.T, m *Middleware, r *http.Request, key string) {
	t.Helper()
	ip, ok := strings.CutPrefix(key, "ip:")
	if !ok {
		t.Fatalf("key %q: want the prefix ip:", key)
	}
	if a, err := netip.ParseAddr(ip); err == nil && (a.String() != ip || a.Zone() != "" || a.Is4In6()) {
		t.Fatalf("key %q: not the canonical form of %v", key, a)
	}
	without := r.Clone(context.Background())
	without.Header.Del("X-Forwarded-For")
	forwarded, fromProxy := lastForwarded(r.Header.Values("X-Forwarded-For"))
	switch {
	case !m.opts.TrustProxy || !fromProxy:
		if other := m.key(without); other != key {
			t.Fatalf("key %q, but %q without X-Forwarded-For, which must not count here", key, other)
		}
	case key != "ip:"+forwarded:
		t.Fatalf("key %q, want the last forwarded address %q", key, forwarded)
	}
	// A client writes the entries before the proxy's: they never count
	// unless every entry is empty.
	spoofed := r.Clone(context.Background())
	spoofed.Header["X-Forwarded-For"] = append([]string{"198.51.100.66"}, r.Header.Values("X-Forwarded-For")...)
	if other := m.key(spoofed); other != key && hasEntry(r.Header.Values("X-Forwarded-For")) {
		t.Fatalf("key %q, but %q when the client adds an X-Forwarded-For entry before the others", key, other)
	}
}

func hasEntry(values []string) bool {
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(e) != "" {
				return true
			}
		}
	}
	return false
}

// FuzzFields: for any rule name, limit, remaining and durations, the
// RateLimit-Policy and RateLimit fields parse as structured-field Lists
// (parseSFList) holding what the draft says, Retry-After is a whole
// number of seconds of at least 1 that never tells a client to come back
// too early, and the problem body is JSON that says the same.
func FuzzFields(f *testing.F) {
	c := fuzzClient(f)
	f.Add("r", int64(1), int64(time.Hour), true, int64(1), int64(0), int64(1500*time.Millisecond), false)
	f.Add("r", int64(1), int64(time.Hour), false, int64(0), int64(time.Minute), int64(0), true)
	f.Add("big", int64(1)<<40, int64(366*24*time.Hour), false, int64(-5), int64(time.Nanosecond), int64(-1), true)
	f.Add("fast", int64(7), int64(1500*time.Microsecond), true, int64(6), int64(0), int64(time.Second+1), false)
	f.Add(`a"b\c`, int64(-1), int64(-1), true, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), true)
	f.Add("é\x00\n;q=1, \"x\"", int64(math.MaxInt64), int64(math.MaxInt64), false, int64(math.MinInt64), int64(math.MinInt64), int64(math.MinInt64), true)
	f.Add("", int64(0), int64(0), false, int64(0), int64(0), int64(0), false)
	f.Add("later", int64(999_999_999_999_999), int64(999_999_999_999_999*time.Nanosecond), false, int64(1_000_000_000_000_000), int64(time.Second-1), int64(time.Second), false)
	f.Fuzz(func(t *testing.T, rule string, limit, period int64, allowed bool, remaining, retry, reset int64, legacy bool) {
		// One policy, alone: its figures come from the rule.
		var b strings.Builder
		writePolicy(&b, rule, limit, time.Duration(period))
		list := parseField(t, "RateLimit-Policy", b.String(), 1)
		checkPolicy(t, list[0], rule, min(max(limit, 0), maxInteger), time.Duration(period))

		// The fields of a response, as the middleware writes them.
		m := &Middleware{c: c, opts: Options{LegacyHeaders: legacy},
			policies: []Policy{{Rule: "r"}, {Rule: "fast"}, {Rule: rule}}}
		d := client.Decision{Allowed: allowed, Rule: rule, Limit: limit, Remaining: remaining,
			RetryAfter: time.Duration(retry), ResetAfter: time.Duration(reset)}
		h := http.Header{}
		m.setFields(h, d)
		checkFields(t, m, h, d)

		// A refusal's Retry-After, and its problem.
		after := retrySeconds(d.RetryAfter)
		checkRetryAfter(t, strconv.FormatInt(after, 10), d.RetryAfter)
		body, err := json.Marshal(quotaExceeded(rule, d.RetryAfter))
		if err != nil {
			t.Fatal(err)
		}
		var p problem
		if err := json.Unmarshal(body, &p); err != nil || p.Status != http.StatusTooManyRequests ||
			!strings.Contains(p.Detail, "retry in "+seconds(after)+".") {
			t.Fatalf("problem %s (%v): want a 429 saying to retry in %d seconds", body, err, after)
		}
	})
}

func parseField(t *testing.T, name, value string, members int) []sfMember {
	t.Helper()
	list, err := parseSFList(value)
	if err != nil {
		t.Fatalf("%s: %s: %v", name, value, err)
	}
	if len(list) != members {
		t.Fatalf("%s: %s: %d members, want %d", name, value, len(list), members)
	}
	return list
}

// checkPolicy: the member is the policy's name with q, the quota, and w,
// the window in whole seconds rounded up, when the period is known.
func checkPolicy(t *testing.T, mb sfMember, rule string, q int64, period time.Duration) {
	t.Helper()
	if name, ok := mb.item.(string); !ok || name != printable(rule) {
		t.Fatalf("policy %v for rule %q: want the String %q", mb, rule, printable(rule))
	}
	if got, ok := mb.param("q"); !ok || got != q {
		t.Fatalf("policy %v: q %v, want %d", mb, got, q)
	}
	w, ok := mb.param("w")
	switch {
	case period <= 0:
		if ok {
			t.Fatalf("policy %v: w for a period of %v", mb, period)
		}
	case !ok:
		t.Fatalf("policy %v: no w for a period of %v", mb, period)
	default:
		checkSeconds(t, "w", w, period, 0)
	}
	if len(mb.params) > 2 {
		t.Fatalf("policy %v: parameters other than q and w", mb)
	}
}

// checkSeconds: v is a whole number of seconds, d rounded up (and at
// least least), or the largest Integer when that is beyond it.
func checkSeconds(t *testing.T, what string, v any, d time.Duration, least int64) {
	t.Helper()
	n, ok := v.(int64)
	if !ok || n < least {
		t.Fatalf("%s = %v for %v: want an Integer of at least %d", what, v, d, least)
	}
	whole, part := int64(d/time.Second), d%time.Second
	want := whole
	if part > 0 {
		want++
	}
	if want = min(max(want, least), maxInteger); n != want {
		t.Fatalf("%s = %d for %v, want %d", what, n, d, want)
	}
}

// checkFields: RateLimit-Policy lists the policies whose rule the node
// knows; RateLimit names the decision's rule with r, never negative and 0
// on a refusal, and t, on a refusal the Retry-After, else the reset when
// known; legacy fields are plain non-negative numbers.
func checkFields(t *testing.T, m *Middleware, h http.Header, d client.Decision) {
	t.Helper()
	var known []Policy
	for _, p := range m.policies {
		if _, ok := m.c.Rule(p.Rule); ok {
			known = append(known, p)
		}
	}
	list := parseField(t, "RateLimit-Policy", h.Get(fieldPolicy), len(known))
	for i, p := range known {
		r, _ := m.c.Rule(p.Rule)
		checkPolicy(t, list[i], p.Rule, r.Limit, r.Period)
	}
	if d.Rule == "" {
		if len(h.Values(fieldRateLimit)) != 0 {
			t.Fatalf("RateLimit %q for a decision of no rule", h.Get(fieldRateLimit))
		}
		return
	}
	mb := parseField(t, "RateLimit", h.Get(fieldRateLimit), 1)[0]
	if name, ok := mb.item.(string); !ok || name != printable(d.Rule) {
		t.Fatalf("RateLimit %v for rule %q", mb, d.Rule)
	}
	left := min(max(d.Remaining, 0), maxInteger)
	if !d.Allowed {
		left = 0
	}
	if r, ok := mb.param("r"); !ok || r != left {
		t.Fatalf("RateLimit %v for %+v: r %v, want %d", mb, d, r, left)
	}
	tv, hasT := mb.param("t")
	switch {
	case !d.Allowed:
		checkSeconds(t, "t", tv, d.RetryAfter, 1)
	case d.ResetAfter > 0:
		checkSeconds(t, "t", tv, d.ResetAfter, 0)
	case hasT:
		t.Fatalf("RateLimit %v: t with no reset known", mb)
	}
	for _, name := range []string{legacyLeft, legacyReset} {
		if v := h.Get(name); v != "" && !isCount(v) {
			t.Fatalf("%s = %q: want a non-negative whole number", name, v)
		}
	}
	if !m.opts.LegacyHeaders && (h.Get(legacyLimit) != "" || h.Get(legacyLeft) != "") {
		t.Fatalf("legacy fields without LegacyHeaders: %v", h)
	}
}

// checkRetryAfter: delta-seconds (RFC 9110 §10.2.3), at least 1, and never
// earlier than the wait.
func checkRetryAfter(t *testing.T, v string, wait time.Duration) {
	t.Helper()
	if !isCount(v) {
		t.Fatalf("Retry-After %q for %v: want delta-seconds", v, wait)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q for %v: want at least 1", v, wait)
	}
	if n < int64(wait/time.Second) || n == int64(wait/time.Second) && wait%time.Second != 0 {
		t.Fatalf("Retry-After %q for %v: earlier than the wait", v, wait)
	}
}

func isCount(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return false
		}
	}
	return true
}

// printable is what a String keeps of s: writeString drops the bytes a
// String cannot hold.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x20 && s[i] <= 0x7e {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
