package httplimit

import (
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

func TestRetrySecondsRoundUp(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want int64
	}{
		{0, 1}, {-time.Second, 1}, {time.Nanosecond, 1}, {time.Second, 1},
		{time.Second + time.Nanosecond, 2}, {2500 * time.Millisecond, 3}, {3 * time.Second, 3},
		{time.Hour - time.Millisecond, 3600},
	}
	for _, tc := range cases {
		if got := retrySeconds(tc.d); got != tc.want {
			t.Errorf("retrySeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestWriteString(t *testing.T) {
	for in, want := range map[string]string{
		"api-per-key": `"api-per-key"`,
		`a"b\c`:       `"a\"b\\c"`,
		"tab\there":   `"tabhere"`,
		"é":           `""`,
	} {
		var b strings.Builder
		writeString(&b, in)
		if b.String() != want {
			t.Errorf("writeString(%q) = %s, want %s", in, b.String(), want)
		}
	}
}

// A rule the node does not know when it answers (the rule was removed
// since the decision) is left out of RateLimit-Policy, whose q is
// required; the decision's own fields are still written.
func TestFieldsOfUnknownRules(t *testing.T) {
	c, err := client.New(client.Config{Logger: slog.New(slog.DiscardHandler),
		Rules: []client.Rule{{Name: "known", Algorithm: "sliding_log", Limit: 7, Period: 90 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cases := []struct {
		policies []Policy
		d        client.Decision
		want     http.Header
	}{{
		policies: []Policy{{Rule: "known"}, {Rule: "later"}},
		d:        client.Decision{Allowed: true, Rule: "later", Limit: 3, Remaining: 2, ResetAfter: 1500 * time.Millisecond},
		want: http.Header{"Ratelimit-Policy": {`"known";q=7;w=90`}, "Ratelimit": {`"later";r=2;t=2`},
			"X-Ratelimit-Limit": {"3"}, "X-Ratelimit-Remaining": {"2"}, "X-Ratelimit-Reset": {"2"}},
	}, {
		policies: []Policy{{Rule: "later"}},
		d:        client.Decision{Rule: "later", Limit: 3, RetryAfter: time.Minute},
		want: http.Header{"Ratelimit": {`"later";r=0;t=60`},
			"X-Ratelimit-Limit": {"3"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"60"}},
	}}
	for _, tc := range cases {
		// Built by hand: New refuses a policy on a rule the client does not
		// know, and here "later" stands for a rule replaced since the
		// decision.
		m := &Middleware{c: c, opts: Options{LegacyHeaders: true}, policies: tc.policies}
		h := http.Header{}
		m.setFields(h, tc.d)
		if len(h) != len(tc.want) {
			t.Errorf("%v: fields %v, want %v", tc.policies, h, tc.want)
		}
		for name, want := range tc.want {
			if got := h.Get(name); got != want[0] {
				t.Errorf("%v: %s = %q, want %q", tc.policies, name, got, want[0])
			}
		}
	}
}

// Durations near the largest time.Duration (a saturated sum, or a
// google.protobuf.Duration beyond 292 years) round up without
// overflowing, and figures past what a structured-field Integer holds (15
// digits) are written as its largest value: a RateLimit field a client
// cannot parse is no field at all. (Rounding up overflowed: Retry-After
// said 1 second for 292 years, and t was left out.)
func TestHugeFigures(t *testing.T) {
	if got := retrySeconds(math.MaxInt64); got != 9223372037 {
		t.Errorf("retrySeconds(MaxInt64) = %d, want 9223372037", got)
	}
	c, err := client.New(client.Config{Logger: slog.New(slog.DiscardHandler),
		Rules: []client.Rule{{Name: "r", Algorithm: "token_bucket", Limit: 1, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := &Middleware{c: c, policies: []Policy{{Rule: "r"}}}
	for _, tc := range []struct {
		d    client.Decision
		want string
	}{
		{client.Decision{Allowed: true, Rule: "r", Remaining: math.MaxInt64, ResetAfter: math.MaxInt64}, `"r";r=999999999999999;t=9223372037`},
		{client.Decision{Rule: "r", RetryAfter: math.MaxInt64}, `"r";r=0;t=9223372037`},
		{client.Decision{Allowed: true, Rule: "r", Remaining: 999999999999999, ResetAfter: time.Second}, `"r";r=999999999999999;t=1`},
	} {
		h := http.Header{}
		m.setFields(h, tc.d)
		if got := h.Get(fieldRateLimit); got != tc.want {
			t.Errorf("%+v: RateLimit %q, want %q", tc.d, got, tc.want)
		}
		if _, err := parseSFList(h.Get(fieldRateLimit)); err != nil {
			t.Errorf("%+v: RateLimit %q: %v", tc.d, h.Get(fieldRateLimit), err)
		}
	}
}
