package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// RuntimeOverride is one key's override set at runtime, through the
// allocator's Admin service, rather than in the rules file. The store keeps
// it; WithRuntime merges it into the file's rules.
type RuntimeOverride struct {
	Rule string
	Key  string // one key, exactly: the API sets no patterns
	// Limit and Burst are an Override's: per the rule's period, and a
	// token bucket's capacity (0: scaled from the rule's).
	Limit, Burst int64
	// Expires is when it stops applying. default: the zero time, never
	Expires time.Time
	// SetBy, SetAt and Note say who set it, when and why, for the audit
	// log and for ListOverrides; they do not change what it means.
	SetBy string
	SetAt time.Time
	Note  string
}

// Live reports whether o applies at now.
func (o *RuntimeOverride) Live(now time.Time) bool {
	return o.Expires.IsZero() || now.Before(o.Expires)
}

// CheckRuntime validates o as an override of r, a rule of the file (not
// an override's rule): what the file's overrides allow, for one key. The
// error is a *FieldError whose Field is o's: "key", "limit" or "burst".
func (r *Rule) CheckRuntime(o *RuntimeOverride) error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Rule: quoteName(r.Name), Field: strings.TrimPrefix(field, "override."), Msg: fmt.Sprintf(format, args...)}
	}
	if o.Key == "" {
		return bad("key", "is required: the key the override is for")
	}
	if r.IsConcurrency() {
		return bad("limit", "concurrency rules take no overrides")
	}
	ov := Override{Key: o.Key, Limit: o.Limit, Burst: o.Burst}
	if err := ov.check(r, "override", bad); err != nil {
		return err
	}
	if _, err := r.forOverride(&ov); err != nil {
		return bad("limit", "%v", err)
	}
	return nil
}

// WithRuntime is s with the runtime overrides that are live at now merged
// into its rules' overrides. This is where the two sources meet, and the
// precedence is decided here only:
//
//   - a runtime override of a key replaces the file's override of that key;
//   - a key the runtime names takes its override before any pattern of the
//     file, as every exact key does (Rule.ForKey);
//   - an expired or deleted runtime override leaves the file's, or the
//     rule, to apply again;
//   - a rule holds at most MaxOverrides exact keys in all: the file's come
//     first, then the runtime's in key order.
//
// Overrides of rules s does not have (removed from the file) wait for the
// rule to come back; so do those the rule no longer admits (a burst on a
// rule that became a window). Each of them is in errs; the rest applies.
// Without a live runtime override, the result is s itself, version and all.
func (s *Set) WithRuntime(ovs []RuntimeOverride, now time.Time) (out *Set, errs []error) {
	byRule := map[string][]RuntimeOverride{}
	for _, o := range ovs {
		if !o.Live(now) {
			continue
		}
		r, ok := s.byName[o.Rule]
		if !ok {
			errs = append(errs, fmt.Errorf("override of key %q: rule %q is not in the rules: it applies when the rule is back", o.Key, o.Rule))
			continue
		}
		if err := r.CheckRuntime(&o); err != nil {
			errs = append(errs, fmt.Errorf("override of key %q: %w", o.Key, err))
			continue
		}
		byRule[o.Rule] = append(byRule[o.Rule], o)
	}
	if len(byRule) == 0 {
		return s, errs
	}
	out = &Set{byName: maps.Clone(s.byName), list: slices.Clone(s.list), envoy: s.envoy}
	for i, r := range out.list {
		list := byRule[r.Name]
		if len(list) == 0 {
			continue
		}
		merged, err := r.withRuntime(list)
		if err != nil {
			errs = append(errs, err)
		}
		out.list[i], out.byName[r.Name] = merged, merged
	}
	out.version = out.hash()
	return out, errs
}

// withRuntime is r, a rule of the file, with its overrides and list's.
// On an error it returns what it could build: r itself at worst.
func (r *Rule) withRuntime(list []RuntimeOverride) (*Rule, error) {
	slices.SortFunc(list, func(a, b RuntimeOverride) int { return strings.Compare(a.Key, b.Key) })
	runtime := make(map[string]bool, len(list))
	for _, o := range list {
		runtime[o.Key] = true
	}
	merged := make([]Override, 0, len(r.Overrides)+len(list))
	for _, o := range r.Overrides {
		if o.Key == "" || !runtime[o.Key] {
			merged = append(merged, o)
		}
	}
	var err error
	for _, o := range list {
		if len(merged) >= MaxOverrides {
			err = fmt.Errorf("rule %q: holds %d overrides, at most %d: the runtime's from key %q on are left out", r.Name, len(merged), MaxOverrides, o.Key)
			break
		}
		merged = append(merged, Override{Key: o.Key, Limit: o.Limit, Burst: o.Burst})
	}
	c := *r
	c.Overrides = merged
	bad := func(field, format string, args ...any) error {
		return &FieldError{Rule: quoteName(r.Name), Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if e := c.normalizeOverrides(bad); e != nil {
		return r, fmt.Errorf("runtime overrides left out: %w", e)
	}
	return &c, err
}
