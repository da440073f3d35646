package httplimit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// body is the problem+json of a refusal.
type body struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func decode(t testing.TB, r reply) body {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var b body
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return b
}

// expect checks a reply's status and the given header values ("" means
// the header must be absent).
func expect(t testing.TB, what string, r reply, status int, headers map[string]string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d (body %q)", what, r.status, status, r.body)
	}
	for name, want := range headers {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %s = %q, want %q", what, name, got, want)
		}
	}
}

// A strict rule is decided by the allocator for every request, so the
// count and every header are exact.
func TestRefusedAfterTheLimit(t *testing.T) {
	c := startAllocator(t)
	srv := limited(t, c, httplimit.Options{
		Policies:  []httplimit.Policy{{Rule: "login"}},
		KeyHeader: "X-API-Key",
	})
	policy := `"login";q=2;w=86400`
	expect(t, "1st", get(t, srv, "X-API-Key: k"), 200, map[string]string{
		"RateLimit-Policy": policy, "RateLimit": `"login";r=1;t=86400`, "Retry-After": ""})
	expect(t, "2nd", get(t, srv, "X-API-Key: k"), 200, map[string]string{
		"RateLimit-Policy": policy, "RateLimit": `"login";r=0;t=86400`, "Retry-After": ""})
	for _, nth := range []string{"3rd", "4th"} {
		r := get(t, srv, "X-API-Key: k")
		expect(t, nth, r, http.StatusTooManyRequests, map[string]string{
			"RateLimit-Policy": policy, "RateLimit": `"login";r=0;t=86400`, "Retry-After": "86400",
			"X-RateLimit-Limit": ""})
		b := decode(t, r)
		want := body{Type: httplimit.ProblemQuotaExceeded, Title: "Quota exceeded", Status: 429,
			Detail: `The rate limit "login" was exceeded; retry in 86400 seconds.`, Violated: []string{"login"}}
		if b.Type != want.Type || b.Title != want.Title || b.Status != want.Status || b.Detail != want.Detail ||
			len(b.Violated) != 1 || b.Violated[0] != "login" {
			t.Fatalf("%s: body %+v, want %+v", nth, b, want)
		}
		if strings.Contains(r.body, `"k"`) {
			t.Fatalf("%s: the body shows the key: %s", nth, r.body)
		}
	}
}

var (
	rateLimitRE = regexp.MustCompile(`^"hourly";r=(\d+)(;t=(\d+))?$`)
	retryRE     = regexp.MustCompile(`^[1-9]\d*$`)
)

// A leased rule: decisions are local, so the count of admitted requests
// is the SDK's business; every response must still carry well-formed
// fields, and the refusal's t must equal its Retry-After.
func TestLeasedRuleFields(t *testing.T) {
	c := startAllocator(t)
	srv := limited(t, c, httplimit.Options{
		Policies:      []httplimit.Policy{{Rule: "hourly"}},
		KeyHeader:     "X-API-Key",
		LegacyHeaders: true,
	})
	for i := range 10 {
		r := get(t, srv, "X-API-Key: leased")
		if got := r.header.Get("RateLimit-Policy"); got != `"hourly";q=3;w=3600` {
			t.Fatalf("request %d: RateLimit-Policy %q", i+1, got)
		}
		m := rateLimitRE.FindStringSubmatch(r.header.Get("RateLimit"))
		if m == nil {
			t.Fatalf("request %d: RateLimit %q is malformed", i+1, r.header.Get("RateLimit"))
		}
		if r.header.Get("X-RateLimit-Limit") != "3" || r.header.Get("X-RateLimit-Remaining") != m[1] ||
			r.header.Get("X-RateLimit-Reset") != m[3] {
			t.Fatalf("request %d: legacy headers %v disagree with RateLimit %q", i+1, r.header, m[0])
		}
		if r.status == http.StatusOK {
			if i == 0 && m[1] != "2" {
				t.Fatalf("first request: r=%s, want 2", m[1])
			}
			continue
		}
		expect(t, "refusal", r, http.StatusTooManyRequests, nil)
		ra := r.header.Get("Retry-After")
		if !retryRE.MatchString(ra) || m[1] != "0" || m[3] != ra {
			t.Fatalf("request %d: Retry-After %q with RateLimit %q; want r=0 and t equal to Retry-After", i+1, ra, m[0])
		}
		if n, _ := strconv.Atoi(ra); n > 3600 {
			t.Fatalf("Retry-After %d s on a rule that refills in an hour", n)
		}
		if b := decode(t, r); b.Status != 429 || b.Type != httplimit.ProblemQuotaExceeded {
			t.Fatalf("body %+v", b)
		}
		if i < 1 {
			t.Fatalf("refused at request %d of a limit of 3", i+1)
		}
		return
	}
	t.Fatal("10 requests passed a limit of 3")
}

// API key before identity before IP; X-Forwarded-For only behind a
// trusted proxy. Each source spends its own quota.
func TestKeyPrecedence(t *testing.T) {
	c := startAllocator(t)
	opts := httplimit.Options{
		Policies:  []httplimit.Policy{{Rule: "login"}},
		KeyHeader: "X-API-Key",
		// Stands in for authentication middleware that set the caller.
		Identity: func(r *http.Request) (string, bool) {
			u := r.Header.Get("X-Test-User")
			return u, u != ""
		},
	}
	srv := limited(t, c, opts)
	drain := func(what string, headers ...string) {
		t.Helper()
		for i := range 2 {
			if r := get(t, srv, headers...); r.status != 200 {
				t.Fatalf("%s: request %d refused: its key was already spent", what, i+1)
			}
		}
		if r := get(t, srv, headers...); r.status != 429 {
			t.Fatalf("%s: 3rd request status %d, want 429", what, r.status)
		}
	}
	drain("API key with a user", "X-API-Key: k1", "X-Test-User: alice")
	drain("the same user without an API key", "X-Test-User: alice")
	drain("no key, no user: the client IP")
	if r := get(t, srv, "X-Forwarded-For: 203.0.113.7"); r.status != 429 {
		t.Fatalf("X-Forwarded-For without TrustProxy chose a new key: status %d", r.status)
	}
	if r := get(t, srv, "X-API-Key: k2"); r.status != 200 {
		t.Fatalf("a fresh API key from a spent IP: status %d", r.status)
	}
	if r := get(t, srv, "X-API-Key: 127.0.0.1"); r.status != 200 {
		t.Fatalf("an API key spelled like the spent IP shared its quota: status %d", r.status)
	}

	opts.TrustProxy = true
	proxied := limited(t, c, opts)
	// The last entry is the one the proxy wrote; what comes before it is
	// whatever the client sent.
	for i, xff := range []string{"203.0.113.7", "198.51.100.1, 203.0.113.7"} {
		if r := get(t, proxied, "X-Forwarded-For: "+xff); r.status != 200 {
			t.Fatalf("behind a proxy, request %d from 203.0.113.7: status %d", i+1, r.status)
		}
	}
	if r := get(t, proxied, "X-Forwarded-For: 10.9.9.9", "X-Forwarded-For: 203.0.113.7"); r.status != 429 {
		t.Fatalf("3rd request from 203.0.113.7 (two header lines): status %d", r.status)
	}
	if r := get(t, proxied, "X-Forwarded-For: 203.0.113.7, 198.51.100.9"); r.status != 200 {
		t.Fatalf("a spoofed first entry decided the key: status %d", r.status)
	}
}

// A key longer than the SDK accepts is hashed, not failed: it is limited
// like any other, and two long keys that differ at the end stay apart.
func TestLongKeyIsHashed(t *testing.T) {
	c := startAllocator(t)
	srv := limited(t, c, httplimit.Options{
		Policies:  []httplimit.Policy{{Rule: "login"}},
		KeyHeader: "X-API-Key",
		OnError:   httplimit.FailClosed, // an SDK error would show as 503
	})
	long := strings.Repeat("k", 600)
	for i, want := range []int{200, 200, 429} {
		if r := get(t, srv, "X-API-Key: "+long+"a"); r.status != want {
			t.Fatalf("long key, request %d: status %d, want %d (%s)", i+1, r.status, want, r.body)
		}
	}
	if r := get(t, srv, "X-API-Key: "+long+"b"); r.status != 200 {
		t.Fatalf("another long key with the same first 600 bytes: status %d", r.status)
	}
}

// A key that is not UTF-8 cannot be an Allot key as it is (it cannot go
// on the wire); it is hashed like a long one and limited globally like any
// other. Two nodes share a strict limit of 2: before, each node fell back
// to its own share for such a key, and the two admitted 4.
func TestNonUTF8KeyIsHashed(t *testing.T) {
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	a, c1 := serveAllocator(t, allocator.Config{Rules: set})
	c2, err := client.New(client.Config{Allocators: []string{a.Addr()}, Logger: quiet(), CheckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	opts := httplimit.Options{Policies: []httplimit.Policy{{Rule: "login"}}, KeyHeader: "X-API-Key"}
	nodes := []*httptest.Server{limited(t, c1, opts), limited(t, c2, opts)}
	served := 0
	for i := range 6 {
		if r := get(t, nodes[i%2], "X-API-Key: bad\xff\xfekey"); r.status == 200 {
			served++
		}
	}
	if served != 2 {
		t.Fatalf("two nodes served %d of 6 requests with the key bad\\xff\\xfekey, want the limit of 2", served)
	}
	if r := get(t, nodes[0], "X-API-Key: bad\xff\xfdkey"); r.status != 200 {
		t.Fatalf("another key that is not UTF-8: status %d, want its own quota", r.status)
	}
}

// Burst and sustained limits checked together: the refusal names the rule
// that refused, and RateLimit-Policy lists both.
//
// "plenty" allows a million a day, yet the SDK may refuse a fresh key for
// a moment while its first lease is small and the next is on its way;
// such refusals must name "plenty", and the loop goes on past them.
func TestMultiRuleReportsTheRefusingRule(t *testing.T) {
	c := startAllocator(t)
	// refusedBy sends requests until one is refused by rule; it returns
	// that reply and how many requests passed before it.
	refusedBy := func(t *testing.T, srv *httptest.Server, key, rule, policy string) (reply, int) {
		t.Helper()
		passed := 0
		for range 1000 {
			r := get(t, srv, "X-API-Key: "+key)
			if got := r.header.Get("RateLimit-Policy"); got != policy {
				t.Fatalf("RateLimit-Policy %q, want %q", got, policy)
			}
			if r.status == http.StatusOK {
				passed++
				continue
			}
			b := decode(t, r)
			if len(b.Violated) != 1 {
				t.Fatalf("violated-policies %q, want one", b.Violated)
			}
			if rl, want := r.header.Get("RateLimit"), strconv.Quote(b.Violated[0])+";r=0;t="+r.header.Get("Retry-After"); rl != want {
				t.Fatalf("RateLimit %q, want %q", rl, want)
			}
			if b.Violated[0] == rule {
				return r, passed
			}
			if b.Violated[0] != "plenty" {
				t.Fatalf("refused by %q", b.Violated[0])
			}
		}
		t.Fatalf("no refusal by %s in 1000 requests", rule)
		return reply{}, 0
	}
	t.Run("burst refuses", func(t *testing.T) {
		srv := limited(t, c, httplimit.Options{KeyHeader: "X-API-Key", Policies: []httplimit.Policy{
			{Rule: "burst"}, {Rule: "plenty"},
		}})
		refusedBy(t, srv, "b", "burst", `"burst";q=2;w=3600, "plenty";q=1000000;w=86400`)
	})
	t.Run("sustained refuses", func(t *testing.T) {
		srv := limited(t, c, httplimit.Options{KeyHeader: "X-API-Key", Policies: []httplimit.Policy{
			{Rule: "plenty"}, {Rule: "login"},
		}})
		r, passed := refusedBy(t, srv, "s", "login", `"plenty";q=1000000;w=86400, "login";q=2;w=86400`)
		// login is strict and asked last, only when plenty has passed: its
		// count is exact.
		if passed != 2 {
			t.Fatalf("%d requests passed a strict limit of 2", passed)
		}
		expect(t, "refused by login", r, 429, map[string]string{
			"RateLimit": `"login";r=0;t=86400`, "Retry-After": "86400"})
	})
}

// Two rules with the same limit: the fields and the refusal name the rule
// the SDK decided by (Decision.Rule), which the limits alone cannot tell.
// The node decides alone here, so every figure is exact.
func TestEqualQuotasAreToldApart(t *testing.T) {
	c := localClient(t,
		client.Rule{Name: "hourly", Algorithm: "token_bucket", Limit: 2, Period: time.Hour},
		client.Rule{Name: "daily", Algorithm: "token_bucket", Limit: 2, Period: 24 * time.Hour})
	only := func(rule string) *httptest.Server {
		return limited(t, c, httplimit.Options{Policies: []httplimit.Policy{{Rule: rule}}, KeyHeader: "X-API-Key"})
	}
	hourly, daily := only("hourly"), only("daily")
	both := limited(t, c, httplimit.Options{KeyHeader: "X-API-Key", LegacyHeaders: true,
		Policies: []httplimit.Policy{{Rule: "hourly"}, {Rule: "daily"}}})
	const policy = `"hourly";q=2;w=3600, "daily";q=2;w=86400`
	refused := func(what string, r reply, rule, retry string) {
		t.Helper()
		expect(t, what, r, http.StatusTooManyRequests, map[string]string{
			"RateLimit-Policy": policy, "RateLimit": strconv.Quote(rule) + ";r=0;t=" + retry, "Retry-After": retry,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": retry})
		b := decode(t, r)
		if want := "The rate limit " + strconv.Quote(rule) + " was exceeded; retry in " + retry + " seconds."; b.Detail != want ||
			len(b.Violated) != 1 || b.Violated[0] != rule {
			t.Fatalf("%s: body %+v, want detail %q and violated-policies [%s]", what, b, want, rule)
		}
	}

	// daily spent once on key d: a request passing both leaves daily with
	// the least remaining, and the next is refused by daily.
	expect(t, "daily alone", get(t, daily, "X-API-Key: d"), 200, map[string]string{
		"RateLimit-Policy": `"daily";q=2;w=86400`, "RateLimit": `"daily";r=1;t=43200`})
	expect(t, "both, daily tighter", get(t, both, "X-API-Key: d"), 200, map[string]string{
		"RateLimit-Policy": policy, "RateLimit": `"daily";r=0;t=86400`,
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "86400"})
	refused("refused by daily", get(t, both, "X-API-Key: d"), "daily", "43200")

	// hourly spent on key h: refused by hourly, and daily is not charged.
	for i := range 2 {
		expect(t, "hourly alone", get(t, hourly, "X-API-Key: h"), 200, map[string]string{
			"RateLimit": `"hourly";r=` + strconv.Itoa(1-i) + ";t=" + strconv.Itoa(1800*(i+1))})
	}
	refused("refused by hourly", get(t, both, "X-API-Key: h"), "hourly", "1800")
	expect(t, "daily untouched", get(t, daily, "X-API-Key: h"), 200, map[string]string{"RateLimit": `"daily";r=1;t=43200`})
}

// Rules are reloaded centrally: RateLimit-Policy shows the rule as the
// node applies it when it answers, not as it was when the middleware was
// built.
func TestPolicyFollowsReloadedRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(limit int, period string) {
		t.Helper()
		yaml := "rules:\n  - name: hourly\n    algorithm: token_bucket\n    limit: " + strconv.Itoa(limit) + "\n    period: " + period + "\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(3, "1h")
	a, c := serveAllocator(t, allocator.Config{RulesFile: path})
	srv := limited(t, c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "hourly"}}, KeyHeader: "X-API-Key"})
	policyOf := func(key string) string {
		t.Helper()
		return get(t, srv, "X-API-Key: "+key).header.Get("RateLimit-Policy")
	}
	if got := policyOf("before"); got != `"hourly";q=3;w=3600` {
		t.Fatalf("RateLimit-Policy %q before the reload", got)
	}

	write(5, "2h")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	// The node learns of the new rules from its next lease (or within half
	// a minute): ask for some on fresh keys until it has them.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if r, ok := c.Rule("hourly"); ok && r.Limit == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not apply the reloaded rules")
		}
		policyOf("fresh-" + strconv.Itoa(i))
		time.Sleep(10 * time.Millisecond)
	}
	if got := policyOf("after"); got != `"hourly";q=5;w=7200` {
		t.Fatalf("RateLimit-Policy %q after the reload", got)
	}
}

// syncBuffer collects log lines written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSDKErrors(t *testing.T) {
	c := startAllocator(t)
	// A closed client cannot decide: a fault of the limiter, not of the
	// request.
	closed := localClient(t, client.Rule{Name: "hourly", Algorithm: "token_bucket", Limit: 3, Period: time.Hour})
	policies := []httplimit.Policy{{Rule: "hourly"}}
	var logs syncBuffer
	failOpen := limited(t, closed, httplimit.Options{Policies: policies, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	failClosed := limited(t, closed, httplimit.Options{Policies: policies, OnError: httplimit.FailClosed})
	closed.Close()
	t.Run("fail open by default, and log", func(t *testing.T) {
		for range 5 {
			expect(t, "closed client", get(t, failOpen), 200, map[string]string{"RateLimit": "", "RateLimit-Policy": ""})
		}
		if got := logs.String(); !strings.Contains(got, "client closed") || strings.Count(got, "\n") != 3 {
			t.Fatalf("logs %q: want the error, three times at most", got)
		}
	})
	t.Run("FailClosed", func(t *testing.T) {
		r := get(t, failClosed)
		expect(t, "closed client", r, http.StatusServiceUnavailable, nil)
		if b := decode(t, r); b.Status != 503 || b.Title != "Service Unavailable" {
			t.Fatalf("body %+v", b)
		}
	})
	t.Run("a cost above the capacity is refused, not served", func(t *testing.T) {
		// No Retry-After (no retry can pass) and no RateLimit (nothing was
		// decided), but RateLimit-Policy, so the client sees the limits it
		// asked more of than they hold; it once had no policy field at all.
		srv := limited(t, c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "hourly"}, {Rule: "plenty"}},
			Cost: func(*http.Request) int64 { return 4 }})
		r := get(t, srv)
		expect(t, "cost 4 of 3", r, 429, map[string]string{"Retry-After": "", "RateLimit": "",
			"RateLimit-Policy": `"hourly";q=3;w=3600, "plenty";q=1000000;w=86400`})
		if b := decode(t, r); b.Type != httplimit.ProblemQuotaExceeded || !strings.Contains(b.Detail, "cannot pass") {
			t.Fatalf("body %+v", b)
		}
	})
	t.Run("a cost of zero is free", func(t *testing.T) {
		srv := limited(t, c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "login"}}, KeyHeader: "X-API-Key",
			Cost: func(r *http.Request) int64 {
				if r.Header.Get("X-Free") != "" {
					return 0
				}
				return 1
			}})
		for range 5 {
			expect(t, "free", get(t, srv, "X-API-Key: free", "X-Free: 1"), 200, map[string]string{"RateLimit": ""})
		}
		expect(t, "charged", get(t, srv, "X-API-Key: free"), 200, map[string]string{"RateLimit": `"login";r=1;t=86400`})
	})
}

func TestLegacyHeaders(t *testing.T) {
	c := startAllocator(t)
	srv := limited(t, c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "login"}}, LegacyHeaders: true})
	get(t, srv)
	get(t, srv)
	expect(t, "refused", get(t, srv), 429, map[string]string{
		"RateLimit-Policy":      `"login";q=2;w=86400`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "86400",
	})
}

func TestNewChecksOptions(t *testing.T) {
	c := startAllocator(t)
	cases := map[string]httplimit.Options{
		"no policies":  {},
		"no rule name": {Policies: []httplimit.Policy{{Rule: "a"}, {}}},
		"twice":        {Policies: []httplimit.Policy{{Rule: "a"}, {Rule: "a"}}},
	}
	for name, opts := range cases {
		if _, err := httplimit.New(c, opts); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := httplimit.New(nil, httplimit.Options{Policies: []httplimit.Policy{{Rule: "a"}}}); err == nil {
		t.Error("New with a nil client succeeded")
	}
	_, err := httplimit.New(c, cases["no rule name"])
	if err == nil || !strings.Contains(err.Error(), "Policies[1].Rule") {
		t.Errorf("error %v does not name the field", err)
	}
	// A client always has rules (client.New fails without): a policy on a
	// rule it does not know is a mistake, told at once.
	_, err = httplimit.New(c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "hourly"}, {Rule: "no-such-rule"}}})
	if !errors.Is(err, client.ErrUnknownRule) || !strings.Contains(err.Error(), `Policies[1].Rule: "no-such-rule"`) {
		t.Errorf("a policy on an unknown rule: %v, want ErrUnknownRule naming Policies[1].Rule", err)
	}
	if _, err := httplimit.New(c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "login"}, {Rule: "hourly"}}}); err != nil {
		t.Errorf("several policies: %v", err)
	}
}

// A rule that a reload removed is refused with 500 and a problem naming
// it, the way the SDK refuses it (ErrUnknownRule): before, every request
// was served, unlimited.
func TestRuleRemovedByReloadIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(name string) {
		t.Helper()
		yaml := "rules:\n  - name: " + name + "\n    algorithm: token_bucket\n    limit: 3\n    period: 1h\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hourly")
	a, c := serveAllocator(t, allocator.Config{RulesFile: path})
	var logs syncBuffer
	srv := limited(t, c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "hourly"}}, KeyHeader: "X-API-Key",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	expect(t, "before the reload", get(t, srv, "X-API-Key: k"), 200, nil)
	write("renamed")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if _, ok := c.Rule("hourly"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not apply the reloaded rules")
		}
		get(t, srv, "X-API-Key: fresh-"+strconv.Itoa(i))
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		r := get(t, srv, "X-API-Key: k")
		expect(t, "after the reload", r, http.StatusInternalServerError, map[string]string{"RateLimit": "", "Retry-After": ""})
		if b := decode(t, r); b.Status != 500 || !strings.Contains(b.Detail, `"hourly"`) {
			t.Fatalf("body %+v, want a 500 problem naming the rule", b)
		}
	}
	if got := logs.String(); !strings.Contains(got, "unknown rule") {
		t.Fatalf("logs %q: want the error", got)
	}
}
