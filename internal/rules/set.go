package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Set is an immutable rule set. Share it freely; replace it as a whole.
type Set struct {
	byName  map[string]*Rule
	list    []*Rule // in file order
	envoy   *Envoy  // the envoy section; nil without one
	version string
}

// NewSet normalizes the rules and builds a Set. Duplicate names are errors.
// The rules are copied: the caller's values are left as they were.
func NewSet(rs []Rule) (*Set, error) {
	s := &Set{byName: make(map[string]*Rule, len(rs))}
	for i := range rs {
		r := rs[i]
		if err := r.Normalize(); err != nil {
			if fe, ok := err.(*FieldError); ok && fe.Rule == "" {
				fe.Rule = fmt.Sprintf("#%d", i+1)
			}
			return nil, err
		}
		if _, dup := s.byName[r.Name]; dup {
			return nil, &FieldError{Rule: quoteName(r.Name), Field: "name", Msg: "duplicate rule name"}
		}
		s.byName[r.Name] = &r
		s.list = append(s.list, &r)
	}
	s.version = s.hash()
	return s, nil
}

// Get returns the named rule.
func (s *Set) Get(name string) (*Rule, bool) {
	r, ok := s.byName[name]
	return r, ok
}

// Rules returns the rules in the order they were defined. Do not modify them.
func (s *Set) Rules() []*Rule { return slices.Clone(s.list) }

// Len is the number of rules.
func (s *Set) Len() int { return len(s.list) }

// Version changes whenever the content of the set changes.
func (s *Set) Version() string { return s.version }

// digest is what the rule means, for a version: its fields, without the
// pointers (the overrides' rules, derived from Overrides, and an
// override's base), whose addresses change with every parse.
func (r *Rule) digest() string {
	if r == nil {
		return "none"
	}
	c := *r
	c.keyed, c.base, c.MaxDebt = nil, nil, nil
	// A rule without max_hold (every rule but a concurrency one) keeps the
	// digest it had before the field.
	// A regional rule (every rule before scope) keeps its digest too.
	s := digestScope(fmt.Sprintf("%+v", c), r.Scope)
	return digestDebt(strings.Replace(s, " MaxHold:0s", "", 1), r.MaxDebt)
}

func (s *Set) hash() string {
	var b strings.Builder
	for _, r := range s.list {
		b.WriteString(r.digest() + "\n")
	}
	if s.envoy != nil { // a file without an envoy section keeps its version
		fmt.Fprintf(&b, "envoy %s\n", s.envoy.digest)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:6])
}
