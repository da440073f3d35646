package rules

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "a", true}, {"a*", "ba", false},
		{"*a", "ba", true}, {"*a", "ab", false}, {"a*b*c", "a-b-c", true}, {"a*b*c", "a-c-b", false},
		{"a**b", "ab", true}, {"*ab*ab*", "xxabyyab", true}, {"*ab*ab*", "xxab", false},
		{"ü*", "über", true}, {"a*a*a*a*b", strings.Repeat("a", 200), false},
	} {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}
