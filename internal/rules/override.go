package rules

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Override gives some keys of a rule a limit of their own: a premium tenant
// at ten times the rule, a partner's API key, a known crawler at a tenth.
// It names one key exactly, or the keys a pattern matches. The rest of the
// rule (algorithm, period, failure mode, lease timings, shadow) is the
// rule's; the lease max is the rule's, capped at the override's capacity,
// or the override's capacity when the rule leaves it to its default.
type Override struct {
	// Key is one key, exactly. Either Key or Match is set.
	Key string
	// Match is a pattern of keys: '*' stands for any run of characters
	// (none included), every other character for itself.
	Match string
	// Limit is the keys' limit per the rule's period.
	Limit int64
	// Burst is the keys' capacity, token_bucket only. default: the rule's
	// burst scaled by Limit over the rule's limit (at least 1)
	Burst int64
}

// Bounds on overrides: exact keys are one map lookup however many; patterns
// are tried in order, so a rule keeps few.
const (
	MaxOverrides     = 100_000
	MaxPatterns      = 64
	MaxOverrideKey   = 512 // the allocator's longest key
	maxPatternLength = 512
)

// keyed holds the rules of a rule's overrides, for ForKey.
type keyed struct {
	exact    map[string]*Rule
	patterns []keyPattern // in file order: the first match wins
}

type keyPattern struct {
	match string
	rule  *Rule
}

// ForKey is the rule that applies to key: the rule of its override, or r.
// A key that an exact override names takes it; else the first pattern that
// matches; else the rule itself. Without overrides it costs one nil check.
func (r *Rule) ForKey(key string) *Rule {
	k := r.keyed
	if k == nil {
		return r
	}
	if o, ok := k.exact[key]; ok {
		return o
	}
	for i := range k.patterns {
		if globMatch(k.patterns[i].match, key) {
			return k.patterns[i].rule
		}
	}
	return r
}

// HasOverrides reports whether some keys of r have limits of their own.
func (r *Rule) HasOverrides() bool { return r.keyed != nil }

// Base is the rule an override's rule came from; a rule without one is
// its own base.
func (r *Rule) Base() *Rule {
	if r.base != nil {
		return r.base
	}
	return r
}

// normalizeOverrides checks r's overrides and builds their rules. r is
// normalized already, and the overrides' rules are made from what it says
// now, never from how it was written: a rule rebuilt from GetRules makes
// the same override rules as the allocator's.
func (r *Rule) normalizeOverrides(bad func(string, string, ...any) error) error {
	if len(r.Overrides) == 0 {
		r.Overrides, r.keyed = nil, nil
		return nil
	}
	if len(r.Overrides) > MaxOverrides {
		return bad("overrides", "holds %d overrides, at most %d", len(r.Overrides), MaxOverrides)
	}
	k := &keyed{exact: make(map[string]*Rule)}
	seen := make(map[string]int, len(r.Overrides))
	for i := range r.Overrides {
		o := &r.Overrides[i]
		field := fmt.Sprintf("overrides[%d]", i)
		if err := o.check(r, field, bad); err != nil {
			return err
		}
		id := "key\x00" + o.Key
		if o.Match != "" {
			id = "match\x00" + o.Match
		}
		if j, dup := seen[id]; dup {
			return bad(field, "names the keys of overrides[%d] again", j)
		}
		seen[id] = i
		or, err := r.forOverride(o)
		if err != nil {
			return bad(field, "%v", err)
		}
		or.base = r
		if r.Algorithm == TokenBucket {
			o.Burst = or.Burst
		}
		if o.Key != "" {
			k.exact[o.Key] = or
			continue
		}
		if len(k.patterns) == MaxPatterns {
			return bad(field+".match", "a rule may hold at most %d patterns (exact keys are not counted)", MaxPatterns)
		}
		k.patterns = append(k.patterns, keyPattern{match: o.Match, rule: or})
	}
	r.keyed = k
	return nil
}

// check validates one override's own fields.
func (o *Override) check(r *Rule, field string, bad func(string, string, ...any) error) error {
	switch {
	case (o.Key == "") == (o.Match == ""):
		return bad(field, "names its keys with key (one key) or match (a pattern), exactly one of them")
	case o.Key != "" && (len(o.Key) > MaxOverrideKey || !utf8.ValidString(o.Key)):
		return bad(field+".key", "must be 1 to %d bytes of UTF-8, as every key", MaxOverrideKey)
	case o.Match != "" && (len(o.Match) > maxPatternLength || !utf8.ValidString(o.Match)):
		return bad(field+".match", "must be 1 to %d bytes of UTF-8", maxPatternLength)
	case o.Match != "" && !strings.Contains(o.Match, "*"):
		return bad(field+".match", "%q has no '*': name one key with key", o.Match)
	case o.Limit <= 0 || o.Limit > MaxLimit:
		return bad(field+".limit", "must be between 1 and %d, got %d", MaxLimit, o.Limit)
	case o.Burst < 0 || o.Burst > MaxLimit:
		return bad(field+".burst", "must be between 1 and %d, got %d", MaxLimit, o.Burst)
	case o.Burst != 0 && r.Algorithm != TokenBucket:
		return bad(field+".burst", "only token_bucket rules have a burst; %s holds its limit", r.Algorithm)
	}
	return nil
}

// forOverride is the normalized rule r with the override's limit and
// burst. A lease max that is the rule's whole capacity becomes the
// override's whole capacity; a smaller one stays, capped at it; so does
// the lease min.
func (r *Rule) forOverride(o *Override) (*Rule, error) {
	d := *r
	d.Overrides, d.keyed, d.base = nil, nil, nil
	d.Limit, d.Burst = o.Limit, 0
	if d.Algorithm == TokenBucket {
		d.Burst = o.Burst
		if d.Burst == 0 {
			d.Burst = max(1, int64(float64(r.Burst)*float64(o.Limit)/float64(r.Limit)))
		}
	}
	capacity := d.Limit
	if d.Algorithm == TokenBucket {
		capacity = d.Burst
	}
	if r.Lease.Max == r.Capacity() {
		d.Lease.Max = 0
	}
	d.Lease.Max = min(d.Lease.Max, capacity)
	d.Lease.Min = min(d.Lease.Min, capacity)
	if err := d.Normalize(); err != nil {
		if fe, ok := err.(*FieldError); ok {
			return nil, fmt.Errorf("%s: %s", fe.Field, fe.Msg)
		}
		return nil, err
	}
	return &d, nil
}
