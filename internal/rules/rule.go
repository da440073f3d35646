// Package rules defines Allot's rate-limit rules and loads them from YAML.
// A Set is immutable once built; reloading builds a new Set.
package rules

import (
	"fmt"
	"math"
	"time"
)

// Algorithm is how a rule counts.
type Algorithm int

// The algorithms a rule may use. Sliding-log rules are exact and strict:
// they are decided centrally for each request, never leased.
const (
	TokenBucket Algorithm = iota + 1
	FixedWindow
	SlidingWindow
	SlidingLog
	// Concurrency limits requests in flight, fleet-wide: no period, a slot
	// taken per request and given back when it ends (concurrency.go).
	Concurrency
)

var algorithmNames = map[Algorithm]string{
	TokenBucket:   "token_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	Concurrency:   "concurrency",
}

func (a Algorithm) String() string {
	if s, ok := algorithmNames[a]; ok {
		return s
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm reads the YAML spelling of an algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if s == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want token_bucket, fixed_window, sliding_window, sliding_log or concurrency)", s)
}

// Failure is what a node does when it holds no lease and cannot reach the
// allocator.
type Failure int

const (
	// FailOpen admits at the node's fallback allowance, limit/N.
	FailOpen Failure = iota + 1
	// FailClosed denies: for security limits (logins, password resets).
	FailClosed
)

func (f Failure) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("Failure(%d)", int(f))
}

// Rule is one named policy. Build rules through Parse, Load or Validate so
// that defaults are filled and limits are checked.
type Rule struct {
	Name      string
	Algorithm Algorithm
	Limit     int64         // tokens per Period
	Period    time.Duration // for a calendar rule, its unit's longest length (calendar.go)
	// Calendar, when set, aligns a fixed window's periods to the calendar
	// in a time zone (calendar.go). Such a rule is strict: its nodes know
	// only Period, not the calendar, so the allocator decides each request.
	Calendar Calendar
	Burst    int64 // capacity; equals Limit for window algorithms
	Failure  Failure
	Strict   bool // decided by Check for every request; true for sliding_log
	// Shadow decides and counts but never refuses: nodes admit what the
	// rule would refuse and report it (Decision.Shadow, metrics). This is
	// how a new rule is rolled out.
	Shadow bool
	Lease  LeaseTuning
	// Overrides give some keys limits of their own (override.go).
	Overrides []Override
	// MaxDebt is the file's max_debt, nil when it gives none: see Debt.
	MaxDebt *int64
	// MaxHold is a concurrency rule's max_hold (concurrency.go): how long
	// a slot taken on a lease stays covered by it should the node lose the
	// allocator. 0 for the other algorithms.
	MaxHold time.Duration
	// Scope is regional (the default) or global (scope.go): whether the
	// limit holds in this region or across every region under a parent.
	Scope Scope

	keyed *keyed // the overrides' rules, by key; nil without overrides
	base  *Rule  // for an override's rule, the rule it overrides
}

// LeaseTuning bounds the leases nodes ask for.
type LeaseTuning struct {
	Min     int64         // smallest lease a node asks for; default 1
	Max     int64         // largest lease; default the capacity
	TTL     time.Duration // how long a lease may be used; default min(Period, 2s)
	Refresh time.Duration // target time between refills of a busy key; default TTL/10
}

// Absence is how long the store keeps a holder whose lease ended without a
// Release (it crashed, or it is cut off and admits on its fallback allowance):
// while it is absent its fallback allowance stays reserved, so that what it
// admits there is not admitted again by the rest of the fleet
// (docs/bounds.md, rule 4). A minute covers the outages worth riding out,
// and 30 TTLs keeps it long against a long lease, whose holders renew less
// often and are missed for longer.
func (l LeaseTuning) Absence() time.Duration { return max(time.Minute, 30*l.TTL) }

// SharePool is the most whole tokens a node pools, unspent, of a share of
// rate tokens per second of a token bucket's rate (0 for none): a tenth of
// a second of it, and a whole token at least. Across the fleet that keeps
// rate lent ahead from turning into a spike (the worst second stays
// within b + 1.1·r, docs/bounds.md rule 2). The node caps its pool there
// (internal/lease).
func SharePool(rate float64) int64 {
	if rate <= 0 {
		return 0
	}
	return max(int64(math.Ceil(rate*sharePoolSeconds)), 1)
}

const sharePoolSeconds = 0.1

// Bounds on what a rule may say. They keep arithmetic exact in float64
// (Redis Lua has no integers) and the sliding log's memory small.
const (
	MaxLimit         = int64(1) << 40
	MaxSlidingLog    = 10_000 // an entry per request, up to one per token: small strict limits only
	MinPeriod        = time.Millisecond
	MaxPeriod        = 366 * 24 * time.Hour
	MaxLeaseTTL      = time.Hour
	MaxNameLength    = 64
	defaultLeaseTTL  = 2 * time.Second
	refreshPerTTL    = 10
	minLeaseDuration = time.Millisecond
)

// Capacity is the most tokens the rule's state can hold: the burst of a
// token bucket, the limit of a window or a log.
func (r *Rule) Capacity() int64 {
	if r.Algorithm == TokenBucket {
		return r.Burst
	}
	return r.Limit
}

// Rate is the sustained rate in tokens per second.
func (r *Rule) Rate() float64 { return float64(r.Limit) / r.Period.Seconds() }

// Leasable reports whether nodes may hold leases on the rule's keys.
// A concurrency rule's keys are leased as slots, not tokens (IsConcurrency).
func (r *Rule) Leasable() bool {
	return !r.Strict && r.Algorithm != SlidingLog && r.Algorithm != Concurrency
}

// FieldError is a validation error that names the rule and the field.
// Loaders add the file and the line.
type FieldError struct {
	File  string
	Line  int
	Rule  string // the rule's name, or "#3" when it has none yet
	Field string // e.g. "lease.max"; quoted when the file spells it oddly; "" for the whole rule
	Msg   string
}

func (e *FieldError) Error() string {
	loc := e.File
	if loc == "" {
		loc = "rules"
	}
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", loc, e.Line)
	}
	switch {
	case e.Rule == "":
		return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
	case e.Field == "": // about the whole rule
		return fmt.Sprintf("%s: rule %s: %s", loc, e.Rule, e.Msg)
	}
	return fmt.Sprintf("%s: rule %s: field %s: %s", loc, e.Rule, e.Field, e.Msg)
}

// Normalize fills the defaults of r and checks every field. The error is a
// *FieldError naming the first bad field.
func (r *Rule) Normalize() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Rule: quoteName(r.Name), Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if err := checkName(r.Name); err != nil {
		return bad("name", "%v", err)
	}
	if _, ok := algorithmNames[r.Algorithm]; !ok {
		return bad("algorithm", "is required (token_bucket, fixed_window, sliding_window, sliding_log or concurrency)")
	}
	if err := r.normalizeScope(bad); err != nil {
		return err
	}
	if r.Algorithm == Concurrency {
		return r.normalizeConcurrency(bad)
	}
	if r.MaxHold != 0 {
		return bad("max_hold", "is for concurrency rules, the longest a slot is covered once its node loses the allocator; a %s rule has no slots", r.Algorithm)
	}
	if r.Limit <= 0 || r.Limit > MaxLimit {
		return bad("limit", "must be between 1 and %d, got %d", MaxLimit, r.Limit)
	}
	if err := r.normalizeCalendar(bad); err != nil {
		return err
	}
	if r.Period < MinPeriod || r.Period > MaxPeriod {
		return bad("period", "must be between %v and %v, got %v", MinPeriod, MaxPeriod, r.Period)
	}
	if err := r.normalizeBurst(bad); err != nil {
		return err
	}
	if r.Failure == 0 {
		r.Failure = FailOpen
	}
	if r.Failure != FailOpen && r.Failure != FailClosed {
		return bad("failure", "must be open or closed")
	}
	if r.Algorithm == SlidingLog {
		if r.Limit > MaxSlidingLog {
			return bad("limit", "a sliding_log keeps one entry per token at worst (one per request): at most %d, got %d (use sliding_window)", MaxSlidingLog, r.Limit)
		}
		r.Strict = true
	}
	if err := r.normalizeLease(bad); err != nil {
		return err
	}
	if err := r.normalizeDebt(bad); err != nil {
		return err
	}
	return r.normalizeOverrides(bad)
}

// normalizeCalendar checks a calendar period and sets what follows from
// it: the rule's nominal Period, and strict. Calendar windows are for fixed
// windows only: a sliding window weighs the window before by how much of
// it one period back still covers, which has no meaning when periods
// differ in length (a 31-day month after a 28-day one), a sliding log
// counts the period before each request, and a token bucket refills at a
// rate. The nodes' lease and fallback machinery counts windows as
// floor(now/Period), which calendar windows are not, and the wire does not
// carry the calendar to them: so the allocator decides every request.
func (r *Rule) normalizeCalendar(bad func(string, string, ...any) error) error {
	c := &r.Calendar
	if c.IsZero() {
		if c.Zone != "" {
			return bad("time_zone", "is for calendar periods (period: day, week, month or year); a duration such as 24h counts from the Unix epoch, in UTC")
		}
		return nil
	}
	if _, ok := calendarNames[c.Unit]; !ok {
		return bad("period", "unknown calendar unit %v (want day, week, month or year)", c.Unit)
	}
	switch r.Algorithm {
	case TokenBucket:
		return bad("period", "%v is a calendar period, for fixed_window rules: a token_bucket refills at a rate, give it a duration such as 24h", c.Unit)
	case SlidingWindow:
		return bad("period", "%v is a calendar period, for fixed_window rules: a sliding_window weighs its previous window by how much of it one period back still covers, and calendar periods differ in length (a 31-day month after a 28-day one); use fixed_window, or a duration such as 720h", c.Unit)
	case SlidingLog:
		return bad("period", "%v is a calendar period, for fixed_window rules: a sliding_log counts the period before each request, which no calendar aligns; use fixed_window, or a duration such as 24h", c.Unit)
	}
	if err := c.load(); err != nil {
		return bad("time_zone", "%v", err)
	}
	r.Period = c.Unit.nominal()
	r.Strict = true
	return nil
}

// IsCalendar reports whether the rule's windows follow the calendar.
func (r *Rule) IsCalendar() bool { return !r.Calendar.IsZero() }

func (r *Rule) normalizeBurst(bad func(string, string, ...any) error) error {
	if r.Algorithm != TokenBucket {
		if r.Burst != 0 && r.Burst != r.Limit {
			return bad("burst", "only token_bucket rules have a burst; %s holds its limit (%d)", r.Algorithm, r.Limit)
		}
		r.Burst = r.Limit
		return nil
	}
	if r.Burst == 0 {
		r.Burst = r.Limit
	}
	if r.Burst < 0 || r.Burst > MaxLimit {
		return bad("burst", "must be between 1 and %d, got %d", MaxLimit, r.Burst)
	}
	if r.Rate() > float64(MaxLimit) {
		return bad("period", "rate of %g tokens/s is above %d", r.Rate(), MaxLimit)
	}
	return nil
}

func (r *Rule) normalizeLease(bad func(string, string, ...any) error) error {
	l := &r.Lease
	if l.Min == 0 {
		l.Min = 1
	}
	if l.Max == 0 {
		l.Max = r.Capacity()
	}
	if l.Min < 0 || l.Min > r.Capacity() {
		return bad("lease.min", "must be between 1 and the capacity %d, got %d", r.Capacity(), l.Min)
	}
	if l.Max < l.Min || l.Max > r.Capacity() {
		return bad("lease.max", "must be between lease.min (%d) and the capacity %d, got %d", l.Min, r.Capacity(), l.Max)
	}
	if l.TTL == 0 {
		l.TTL = min(r.Period, defaultLeaseTTL)
	}
	if l.TTL < minLeaseDuration || l.TTL > MaxLeaseTTL {
		return bad("lease.ttl", "must be between %v and %v, got %v", minLeaseDuration, MaxLeaseTTL, l.TTL)
	}
	if l.Refresh == 0 {
		l.Refresh = max(l.TTL/refreshPerTTL, minLeaseDuration)
	}
	if l.Refresh < minLeaseDuration || l.Refresh > l.TTL {
		return bad("lease.refresh", "must be between %v and lease.ttl (%v), got %v", minLeaseDuration, l.TTL, l.Refresh)
	}
	return nil
}

// checkName keeps names safe in Redis keys, metrics labels and logs.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("is required")
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("is %d bytes, at most %d", len(name), MaxNameLength)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return fmt.Errorf("%q: use letters, digits, '-', '_' and '.', starting with a letter or digit", name)
		}
	}
	return nil
}

// ValidName reports whether s could name a rule; the server uses it to
// reject garbage before looking a rule up.
func ValidName(s string) error { return checkName(s) }

func quoteName(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf("%q", name)
}
