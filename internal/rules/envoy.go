package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file holds the envoy section of a rules file: Envoy's rate limit
// service descriptors (in the shape of envoyproxy/ratelimit's config),
// each limit turned into a Rule that the store decides like any other.
// envoy_yaml.go parses it; internal/envoy serves it.

// Envoy is the envoy section: the domains Envoy's rate limit filter asks
// about, and the response headers to add. It is immutable once parsed.
type Envoy struct {
	// Headers says which rate limit headers responses ask Envoy to add.
	Headers EnvoyHeaders
	domains map[string]*EnvoyDomain
	order   []string // domain names in file order
	digest  string   // changes whenever the section's content does
}

// EnvoyHeaders selects the response headers a ShouldRateLimit answer asks
// Envoy to add (response_headers_to_add).
type EnvoyHeaders int

const (
	// EnvoyHeadersNone adds none: Envoy's own enable_x_ratelimit_headers
	// can still write them from the descriptor statuses.
	EnvoyHeadersNone EnvoyHeaders = iota
	// EnvoyHeadersXRateLimit adds X-RateLimit-Limit, -Remaining and -Reset
	// as Envoy's DRAFT_VERSION_03 option writes them.
	EnvoyHeadersXRateLimit
	// EnvoyHeadersRateLimit adds RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-10).
	EnvoyHeadersRateLimit
)

var envoyHeaderNames = map[string]EnvoyHeaders{
	"none":        EnvoyHeadersNone,
	"x-ratelimit": EnvoyHeadersXRateLimit,
	"ratelimit":   EnvoyHeadersRateLimit,
}

// EnvoyDomain is one domain: a tree of descriptors.
type EnvoyDomain struct {
	Name string
	// Algorithm is what the domain's limits use unless they say otherwise,
	// and what request overrides use.
	Algorithm Algorithm
	root      envoyNode
}

// envoyNode is one level of descriptors: the entries a request's entry
// may match, most specific first.
type envoyNode struct {
	exact    map[envoyPair]*envoyDescriptor // key and value
	patterns []*envoyDescriptor             // value holding a '*', in file order
	anyValue map[string]*envoyDescriptor    // key only
}

type envoyPair struct{ key, value string }

// envoyDescriptor is one configured descriptor entry.
type envoyDescriptor struct {
	key, value string // value: "" for any; as written for a pattern
	// pattern: value holds a '*' (anywhere: "abc*", "*.example.com",
	// "/api/*/action"), matched by globMatch, the overrides' matcher.
	pattern  bool
	limit    *EnvoyLimit // nil: a level on the way to nested descriptors
	children envoyNode
}

// EnvoyLimit is the rate_limit of a descriptor.
type EnvoyLimit struct {
	// ID is the name of the limit's rule (EnvoyRuleName), also when it
	// has none: metrics and headers name the limit by it.
	ID string
	// Rule decides the limit in the store; nil when Unlimited or when
	// RequestsPerUnit is 0.
	Rule *Rule
	// Path is the descriptor the limit belongs to, for messages:
	// "message_type=marketing/to_number".
	Path            string
	RequestsPerUnit uint32
	Unit            EnvoyUnit
	UnitMultiplier  uint32 // >= 1
	// Unlimited answers OK without counting.
	Unlimited bool
	// Shadow decides and counts but never refuses.
	Shadow bool
	// Quota is envoyproxy/ratelimit's quota_mode, a soft limit: it decides
	// and counts, an exceeded one says OVER_LIMIT in its own status while
	// the request is admitted, and the request is refused only when every
	// quota limit it matched is exceeded (QuotaExhausted).
	Quota bool
	// Name is the rate_limit's name, which replaces entries refer to.
	Name string
	// Replaces names the limits this one replaces when both match.
	Replaces []string
	// Shared holds, for each entry of the limit's path, the pattern whose
	// values share one counter (share_threshold: true, as in
	// envoyproxy/ratelimit), or "" where each value counts apart; nil
	// when no entry shares. The store key writes the pattern for those
	// entries, so "files/a" and "files/b" under "files/*" spend from one
	// count instead of one each.
	Shared []string
}

// Soft reports whether the limit never refuses a request on its own:
// shadow_mode or quota_mode.
func (l *EnvoyLimit) Soft() bool { return l.Shadow || l.Quota }

// Period is how long the limit's window is.
func (l *EnvoyLimit) Period() time.Duration {
	return l.Unit.Duration() * time.Duration(l.UnitMultiplier)
}

// EnvoyUnit is the unit of an Envoy limit. The names and numbers are those
// of envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit.
type EnvoyUnit int32

// The units, numbered as in Envoy's API.
const (
	EnvoySecond EnvoyUnit = 1
	EnvoyMinute EnvoyUnit = 2
	EnvoyHour   EnvoyUnit = 3
	EnvoyDay    EnvoyUnit = 4
	EnvoyMonth  EnvoyUnit = 5
	EnvoyYear   EnvoyUnit = 6
	EnvoyWeek   EnvoyUnit = 7
)

// envoyUnits are the units' lengths. Months and years have a fixed length,
// as envoyproxy/ratelimit counts them: windows are aligned to the Unix
// epoch, not to the calendar.
var envoyUnits = map[EnvoyUnit]struct {
	name string
	d    time.Duration
}{
	EnvoySecond: {"second", time.Second},
	EnvoyMinute: {"minute", time.Minute},
	EnvoyHour:   {"hour", time.Hour},
	EnvoyDay:    {"day", 24 * time.Hour},
	EnvoyWeek:   {"week", 7 * 24 * time.Hour},
	EnvoyMonth:  {"month", 30 * 24 * time.Hour},
	EnvoyYear:   {"year", 365 * 24 * time.Hour},
}

// Duration is the unit's length; 0 for an unknown unit.
func (u EnvoyUnit) Duration() time.Duration { return envoyUnits[u].d }

func (u EnvoyUnit) String() string {
	if v, ok := envoyUnits[u]; ok {
		return v.name
	}
	return fmt.Sprintf("EnvoyUnit(%d)", int32(u))
}

// ParseEnvoyUnit reads a unit's name, in any case: "second", "MINUTE".
func ParseEnvoyUnit(s string) (EnvoyUnit, error) {
	for u, v := range envoyUnits {
		if strings.EqualFold(s, v.name) {
			return u, nil
		}
	}
	return 0, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", s)
}

// Domain returns a configured domain.
func (e *Envoy) Domain(name string) (*EnvoyDomain, bool) {
	d, ok := e.domains[name]
	return d, ok
}

// Domains returns the domain names in file order.
func (e *Envoy) Domains() []string { return append([]string(nil), e.order...) }

// Lookup finds the limit of a request's descriptor, whose n entries entry
// returns, the way envoyproxy/ratelimit does: at each level an entry
// matches its key and value, else a value pattern ('*' for any run of
// characters, anywhere in the value: "abc*", "/api/*/action"; the first
// in file order), else its key alone; a limit applies only if the
// descriptor's last entry lands on it. A descriptor with more entries
// than the matched levels, or fewer, has no limit (nil).
func (d *EnvoyDomain) Lookup(n int, entry func(i int) (key, value string)) *EnvoyLimit {
	level := &d.root
	for i := range n {
		key, value := entry(i)
		next := level.match(key, value)
		if next == nil {
			return nil
		}
		if i == n-1 {
			return next.limit
		}
		level = &next.children
	}
	return nil
}

func (l *envoyNode) match(key, value string) *envoyDescriptor {
	if d := l.exact[envoyPair{key, value}]; d != nil {
		return d
	}
	for _, d := range l.patterns {
		if d.key == key && globMatch(d.value, value) {
			return d
		}
	}
	return l.anyValue[key]
}

// Limits returns the domain's limits (its descriptors with a rate_limit),
// sorted by ID: what start-up logs count and metrics start at zero.
func (d *EnvoyDomain) Limits() []*EnvoyLimit {
	var out []*EnvoyLimit
	d.root.limits(&out)
	slices.SortFunc(out, func(a, b *EnvoyLimit) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (l *envoyNode) limits(out *[]*EnvoyLimit) {
	add := func(d *envoyDescriptor) {
		if d.limit != nil {
			*out = append(*out, d.limit)
		}
		d.children.limits(out)
	}
	for _, d := range l.exact {
		add(d)
	}
	for _, d := range l.patterns {
		add(d)
	}
	for _, d := range l.anyValue {
		add(d)
	}
}

// EnvoyEntry is one step of a descriptor's path, for naming its rule.
type EnvoyEntry struct {
	Key, Value string // Value "" for any value; as written for a pattern ("abc*")
	// Shared: the values a pattern matches share one counter
	// (share_threshold). Not part of the rule's name: the counter's key
	// says it.
	Shared bool
}

// envoyNamePrefix starts every rule name made from the envoy section.
const envoyNamePrefix = "envoy."

// envoyHashLen is the length of the hash that ends a generated name: 40
// bits, unique among any config's descriptors (Parse checks).
const envoyHashLen = 10

// EnvoyRuleName derives the name of the rule behind a descriptor's limit:
// "envoy.<domain>.<key>_<value>....<hash>", the readable part cut to fit
// 64 bytes and made of letters, digits, '-', '_' and '.', the hash over
// the domain, the path, the kind ("" for configured limits, "override"
// for a request's) and the period. The period is part of it so that a
// limit whose unit changes starts a fresh window, as in envoyproxy/ratelimit,
// whose counters carry the window in their keys.
func EnvoyRuleName(domain, kind string, path []EnvoyEntry, period time.Duration) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %d", domain, kind, period)
	for _, e := range path {
		fmt.Fprintf(h, " %q=%q", e.Key, e.Value)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:envoyHashLen]

	parts := []string{domain}
	if kind != "" {
		parts = append(parts, kind)
	}
	for _, e := range path {
		if e.Value == "" {
			parts = append(parts, e.Key)
		} else {
			parts = append(parts, e.Key+"_"+e.Value)
		}
	}
	readable := sanitizeName(strings.Join(parts, "."))
	room := MaxNameLength - len(envoyNamePrefix) - 1 - envoyHashLen
	if len(readable) > room {
		readable = readable[:room]
	}
	return envoyNamePrefix + readable + "." + sum
}

// sanitizeName keeps what a rule name may hold and writes '_' for the rest.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			c = '_'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// NewEnvoyRule builds the rule of a limit: requestsPerUnit per period,
// counted by alg. It is how both the rules file and a request's limit
// override make theirs.
func NewEnvoyRule(name string, alg Algorithm, requestsPerUnit uint32, period time.Duration) (*Rule, error) {
	r := &Rule{Name: name, Algorithm: alg, Limit: int64(requestsPerUnit), Period: period}
	if err := r.Normalize(); err != nil {
		return nil, err
	}
	return r, nil
}

// Envoy returns the rules file's envoy section, or nil when it has none.
func (s *Set) Envoy() *Envoy { return s.envoy }
