package oracle

import (
	"fmt"
	"math"
	"time"
)

// Algorithm is a rule's limiting algorithm.
type Algorithm int

// The algorithms a rule may use.
const (
	TokenBucket Algorithm = iota + 1
	FixedWindow
	SlidingWindow
	SlidingLog
)

// String is the algorithm's name in a rules file.
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token_bucket"
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case SlidingLog:
		return "sliding_log"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// Mode is how a node decided an admission.
type Mode int

// The modes of an admission.
const (
	// Lease: spent from tokens or a rate share the allocator lent.
	Lease Mode = iota + 1
	// Fallback: decided on the node's local fallback allowance.
	Fallback
	// Strict: decided centrally by the store, one request at a time.
	Strict
)

// String is the mode's name, as a trace shows it.
func (m Mode) String() string {
	switch m {
	case Lease:
		return "lease"
	case Fallback:
		return "fallback"
	case Strict:
		return "strict"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Rule is what the oracle knows of a rule: its fields, nothing computed by
// Allot. Zero fields take the rules package's documented defaults.
type Rule struct {
	Name      string
	Algorithm Algorithm
	Limit     int64         // tokens per Period: l; the rate is r = Limit/Period
	Period    time.Duration // P
	// TTL is the lease TTL L; 0 means min(Period, 2 s).
	TTL time.Duration
	// Burst is a token bucket's capacity b; 0 means Limit. Window rules
	// and the sliding log hold their Limit and ignore it.
	Burst int64
	// FailClosed: the rule denies without the allocator (failure: closed).
	FailClosed bool
	// Strict: every request is decided centrally; always so for SlidingLog.
	// A strict rule has no holders.
	Strict bool
	// Absence is how long the store keeps a holder whose lease ended
	// without a release; 0 means max(1 min, 30·TTL).
	Absence time.Duration
	// Settles: the rule's requests may be settled after their work
	// (Oracle.Settled); its bounds then carry its debt D: MaxDebt when
	// MaxDebtSet, else the documented default (a token bucket's burst,
	// none for the windows and the log). Without it D is 0.
	Settles    bool
	MaxDebt    int64
	MaxDebtSet bool
}

// debt is the D the rule's bounds carry.
func (r Rule) debt() float64 {
	switch {
	case !r.Settles:
		return 0
	case r.MaxDebtSet:
		return float64(r.MaxDebt)
	case r.Algorithm == TokenBucket:
		return float64(r.Burst)
	}
	return 0
}

// normalize fills the defaults and says what is wrong, if anything.
func (r Rule) normalize() (Rule, error) {
	switch {
	case r.Name == "":
		return r, fmt.Errorf("rule without a name")
	case r.Algorithm < TokenBucket || r.Algorithm > SlidingLog:
		return r, fmt.Errorf("rule %s: unknown algorithm %d", r.Name, int(r.Algorithm))
	case r.Limit <= 0 || r.Period <= 0:
		return r, fmt.Errorf("rule %s: limit %d and period %v must be positive", r.Name, r.Limit, r.Period)
	case r.TTL < 0 || r.Burst < 0 || r.Absence < 0 || r.MaxDebt < 0:
		return r, fmt.Errorf("rule %s: negative ttl, burst or absence", r.Name)
	}
	if r.TTL == 0 {
		r.TTL = min(r.Period, 2*time.Second)
	}
	if r.Algorithm != TokenBucket || r.Burst == 0 {
		r.Burst = r.Limit
	}
	if r.Absence == 0 {
		r.Absence = max(time.Minute, 30*r.TTL)
	}
	if r.Algorithm == SlidingLog {
		r.Strict = true
	}
	return r, nil
}

// version is one rule as it stood from start until end (the next
// SetRule, or forever). Versions of one epoch share an algorithm and, for
// the windows and the log, a period: their windows may be compared, and a
// window spanning versions is held to the largest of their bounds.
type version struct {
	Rule
	start, end time.Duration
	// gone is when no node decides under the version any more: its end,
	// unless the next one was said to spread (Oracle.Spreading), then the
	// instant every node had learned a later one (Oracle.Learned).
	gone  time.Duration
	epoch int
	rate  float64 // tokens per second
}

// ruleState is the history of one rule.
type ruleState struct {
	vers   []version
	live   int           // lookback's cursor: no version before it matters any more
	maxTTL time.Duration // the largest TTL any version had
}

const forever = time.Duration(math.MaxInt64)

// set appends a version in force from at. It starts a new epoch when the
// algorithm changes, or the period of a rule that is not a token bucket.
func (rs *ruleState) set(at time.Duration, r Rule) {
	v := version{Rule: r, start: at, end: forever, gone: forever, rate: float64(r.Limit) / r.Period.Seconds()}
	if n := len(rs.vers); n > 0 {
		prev := &rs.vers[n-1]
		prev.end = at
		if prev.gone == forever {
			prev.gone = at
		}
		v.epoch = prev.epoch
		if prev.Algorithm != r.Algorithm || (r.Algorithm != TokenBucket && prev.Period != r.Period) {
			v.epoch++
		}
	}
	rs.vers = append(rs.vers, v)
	rs.maxTTL = max(rs.maxTTL, r.TTL)
}

func (rs *ruleState) cur() *version { return &rs.vers[len(rs.vers)-1] }

// spreading marks the version before the current one as still in force on
// some node: its end waits for learned.
func (rs *ruleState) spreading() int {
	k := len(rs.vers) - 1
	if k > 0 {
		rs.vers[k-1].gone = forever
	}
	return k
}

// learned says every node decides under version ver or a later one from
// at: the versions before it are gone at at (or at their end, if later).
func (rs *ruleState) learned(at time.Duration, ver int) {
	for i := range min(ver, len(rs.vers)) {
		if v := &rs.vers[i]; v.gone == forever {
			v.gone = max(at, v.end)
		}
	}
}

// lookback is the oldest version of the current epoch whose leases may
// still be spent at at: a token granted under version j is spent before
// j's end + j's TTL, and a node that has not learned version j+1 decides
// under j until it does (gone). Each admission carries it: a window is held to the
// largest bounds among its admissions' lookbacks and the current version.
// Calls come in the order of true time, so the cursor only moves on.
func (rs *ruleState) lookback(at time.Duration) int {
	k := len(rs.vers) - 1
	for rs.live < k {
		v := &rs.vers[rs.live]
		if v.epoch == rs.vers[k].epoch && (v.gone == forever || v.gone+v.TTL > at) {
			break
		}
		rs.live++
	}
	return rs.live
}

// params are a rate bound's terms: A[t1, t2] ≤ b + r·(t2 − t1 + l).
type params struct{ b, r, l float64 }

func (p params) max(q params) params {
	return params{b: max(p.b, q.b), r: max(p.r, q.r), l: max(p.l, q.l)}
}

// rateParams are version v's terms for the fleet (perNode 0: b, r, L) or
// for one node's unreserved fallback (perNode N: ⌈b/N⌉ + 1, r/N, no L),
// with times in nanoseconds: r in tokens per nanosecond, l in nanoseconds.
func (rs *ruleState) rateParams(v, perNode int) params {
	ver := &rs.vers[v]
	if perNode > 0 {
		return params{b: ceilDiv(ver.Burst, perNode) + 1 + ver.debt()/float64(perNode), r: ver.rate / 1e9 / float64(perNode)}
	}
	return params{b: float64(ver.Burst) + ver.debt(), r: ver.rate / 1e9, l: float64(ver.TTL)}
}

// boundKind names a count bound over a window of admissions.
type boundKind int

const (
	boundSecond    boundKind = iota // b + 1.1·r + n: a token bucket's calm second
	boundLimit                      // l: a store window, a sliding log
	boundTwice                      // 2·l: a sliding window over P of true time
	boundNodeLimit                  // ⌈l/N⌉: one node's unreserved fallback
)

// bound is kind's bound for a window whose admissions look back to version
// lo, with the current version: the largest terms among lo and every later
// version. n is the fleet size.
func (rs *ruleState) bound(kind boundKind, lo, n int) float64 {
	var b, r, d float64
	var l int64
	for i := lo; i < len(rs.vers); i++ {
		v := &rs.vers[i]
		b, r, l, d = max(b, float64(v.Burst)), max(r, v.rate), max(l, v.Limit), max(d, v.debt())
	}
	// d, the rule's debt when it settles (Rule.Settles): bounds.md's
	// "Settled costs" (l + D a window, b + ... + D a token bucket).
	switch kind {
	case boundSecond:
		// n, the world's fleet: a share split below a token a node is
		// earned in whole tokens, and each node may carry the fraction of
		// one into the second.
		return b + 1.1*r + 2*float64(n) + d
	case boundTwice:
		return 2 * (float64(l) + d)
	case boundNodeLimit:
		return ceilDiv(l, n) + math.Ceil(d/float64(n))
	}
	return float64(l) + d
}

func ceilDiv(a int64, n int) float64 { return float64((a + int64(n) - 1) / int64(n)) }

// floorDiv is ⌊a/p⌋, also for a negative a (a store clock stepped back
// below zero).
func floorDiv(a, p time.Duration) int64 {
	q := a / p
	if a%p != 0 && a < 0 {
		q--
	}
	return int64(q)
}

// exceeds says whether a measured count is above a bound, beyond
// floating-point noise (the bounds are real; counts are whole tokens).
func exceeds(measured, bound float64) bool {
	return measured > bound+1e-6+1e-12*math.Abs(bound)
}
