package rules

import (
	"fmt"
	"strings"
)

// Scope says where a rule's limit holds. A regional rule's limit is the
// region's own: its allocator's store keeps the whole truth. A global
// rule's limit holds across every region: an allocator with a parent
// (cmd/allocator --parent) leases the region's part of it from the parent,
// as a node leases from its allocator, and lends its own nodes from that
// lease alone (internal/region). An allocator without a parent serves a
// global rule as a regional one.
type Scope uint8

const (
	// ScopeRegional is the default: the limit is the region's.
	ScopeRegional Scope = iota
	// ScopeGlobal: one limit across every region under the same parent.
	ScopeGlobal
)

func (s Scope) String() string {
	switch s {
	case ScopeRegional:
		return "regional"
	case ScopeGlobal:
		return "global"
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// ParseScope reads a rules file's scope.
func ParseScope(s string) (Scope, error) {
	switch s {
	case "regional":
		return ScopeRegional, nil
	case "global":
		return ScopeGlobal, nil
	}
	return 0, fmt.Errorf("must be regional or global, got %q", s)
}

// IsGlobal reports whether r's limit holds across regions.
func (r *Rule) IsGlobal() bool { return r.Scope == ScopeGlobal }

// normalizeScope checks what a global rule may be. A region lends its
// nodes tokens out of a lease of the parent's, whose tokens die with it:
// that is a token bucket's lease. A window's tokens belong to one window
// of the parent's clock, a strict rule is decided per request by one
// store, and a concurrency rule's slots are held, not spent; none of them
// goes through a region's lease yet.
func (r *Rule) normalizeScope(bad func(string, string, ...any) error) error {
	switch {
	case r.Scope != ScopeRegional && r.Scope != ScopeGlobal:
		return bad("scope", "must be regional or global")
	case r.Scope == ScopeRegional:
		return nil
	case r.Algorithm != TokenBucket:
		return bad("scope", "global is for token_bucket rules only, got %s: a region lends its nodes a lease of the parent's tokens, and only a token bucket's leases go through a region", r.Algorithm)
	case r.Strict:
		return bad("scope", "global is not for strict rules: a strict rule is decided request by request by one store, and a region has only a lease of the parent's")
	}
	return nil
}

// digestScope leaves a regional rule (every rule before the field) with
// the digest it had before, so that its rules version does not change.
func digestScope(s string, scope Scope) string {
	s = strings.Replace(s, " Scope:regional", "", 1)
	if scope != ScopeRegional {
		s = strings.Replace(s, " Scope:"+scope.String(), "", 1) + " scope:" + scope.String()
	}
	return s
}
