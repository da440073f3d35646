package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/sfv"
)

// The field names of draft-ietf-httpapi-ratelimit-headers-10, and the
// older ones that many clients still read.
const (
	fieldPolicy    = "RateLimit-Policy"
	fieldRateLimit = "RateLimit"
	legacyLimit    = "X-RateLimit-Limit"
	legacyLeft     = "X-RateLimit-Remaining"
	legacyReset    = "X-RateLimit-Reset"
)

// setFields writes RateLimit-Policy (setPolicy), and RateLimit for the
// rule the decision is about.
//
//	RateLimit-Policy: "burst";q=10;w=1, "hourly";q=1000;w=3600
//	RateLimit: "hourly";r=0;t=1800
//
// q and w are the rule's limit and period as the node applies them now:
// rules are reloaded centrally, so they are looked up for each response. A
// rule not known yet is left out, since q is required. r is what this node
// can still admit on the key without asking the allocator, a hint rather
// than the fleet-wide count; t is, on a refusal, the Retry-After, and
// otherwise the time until the quota is whole again, left out when the SDK
// does not know it.
func (m *Middleware) setFields(h http.Header, d client.Decision) {
	m.setPolicy(h)
	if d.Rule == "" {
		return
	}
	left := max(d.Remaining, 0)
	if !d.Allowed {
		left = 0
	}
	var t int64 = -1
	switch {
	case !d.Allowed:
		t = retrySeconds(d.RetryAfter)
	case d.ResetAfter > 0:
		t = ceilSeconds(d.ResetAfter)
	}
	var b strings.Builder
	writeString(&b, d.Rule)
	b.WriteString(";r=")
	writeInteger(&b, left)
	if t >= 0 {
		b.WriteString(";t=")
		writeInteger(&b, t)
	}
	h.Set(fieldRateLimit, b.String())
	if m.opts.LegacyHeaders {
		h.Set(legacyLimit, fmtInt(d.Limit))
		h.Set(legacyLeft, fmtInt(left))
		if t >= 0 {
			h.Set(legacyReset, fmtInt(t))
		}
	}
}

// setPolicy writes RateLimit-Policy for every policy whose rule the node
// knows. It is on every answer, a refusal that no decision was made for
// included (a cost above a rule's capacity): there it is how the client
// learns the limits it asked more of than they hold.
func (m *Middleware) setPolicy(h http.Header) {
	var b strings.Builder
	for _, p := range m.policies {
		r, ok := m.c.Rule(p.Rule)
		if !ok || r.Limit <= 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		writePolicy(&b, p.Rule, r.Limit, r.Period)
	}
	if b.Len() > 0 {
		h.Set(fieldPolicy, b.String())
	}
}

// writePolicy writes one member of RateLimit-Policy: the policy's name,
// its quota q and its window w in seconds, left out when unknown.
func writePolicy(b *strings.Builder, name string, limit int64, period time.Duration) {
	writeString(b, name)
	b.WriteString(";q=")
	writeInteger(b, limit)
	if period > 0 {
		b.WriteString(";w=")
		writeInteger(b, ceilSeconds(period))
	}
}

// maxInteger is the largest structured-field Integer: 15 digits (RFC 9651
// §3.3.1). A recipient refuses the whole field for a longer one.
const maxInteger = 999_999_999_999_999

// writeInteger writes n, a count or a number of seconds, as a
// structured-field Integer: never negative, and at most maxInteger, which
// is more tokens than a rule holds and more seconds than 31 million years.
func writeInteger(b *strings.Builder, n int64) {
	b.WriteString(fmtInt(min(max(n, 0), maxInteger)))
}

// writeString writes s as a structured-field String; rule names, letters,
// digits and "-_.", never hold a character it would drop.
func writeString(b *strings.Builder, s string) { sfv.WriteString(b, s) }

func ceilSeconds(d time.Duration) int64 { return sfv.CeilSeconds(d) }

// retrySeconds is the Retry-After of a refusal: rounded up, and at least
// one second, since 0 would invite an immediate retry that fails again.
func retrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }
