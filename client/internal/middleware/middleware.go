// Package middleware holds what the SDK's middlewares, httplimit and
// grpclimit, share: the checks their New makes of the rules their policies
// name, the keys they take from requests made ones the SDK accepts, and
// the pace of their error logs.
package middleware

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/allot-dev/allot/client"
)

// PolicyRules returns the rules a middleware's policies name, in their
// order, once CheckRules has found them sound.
func PolicyRules[P any](pkg string, c *client.Client, policies []P, rule func(P) string) ([]string, error) {
	rules := make([]string, len(policies))
	for i, p := range policies {
		rules[i] = rule(p)
	}
	if err := CheckRules(pkg, c, rules); err != nil {
		return nil, err
	}
	return rules, nil
}

// CheckRules checks the rules a middleware's policies name, in the
// policies' order, as its New does: at least one, none empty or named
// twice, each known to c, and no two strict ones. pkg names the middleware
// in the errors.
func CheckRules(pkg string, c *client.Client, rules []string) error {
	if len(rules) == 0 {
		return fmt.Errorf("%s: Options.Policies is empty", pkg)
	}
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		switch {
		case r == "":
			return fmt.Errorf("%s: Options.Policies[%d].Rule is empty", pkg, i)
		case seen[r]:
			return fmt.Errorf("%s: Options.Policies[%d].Rule: %q appears twice", pkg, i, r)
		}
		seen[r] = true
	}
	strict := -1
	for i, name := range rules {
		r, ok := c.Rule(name)
		if !ok {
			return fmt.Errorf("%s: Options.Policies[%d].Rule: %q: %w: not in the client's rules", pkg, i, name, client.ErrUnknownRule)
		}
		if r.Strict && len(rules) > 1 {
			// Checked together, a second strict rule is an error on every
			// request, which the default OnError serves: never limited.
			if strict >= 0 {
				return fmt.Errorf("%s: Options.Policies[%d].Rule: %q is strict, as is Policies[%d]'s %q: %w",
					pkg, i, name, strict, rules[strict], client.ErrTwoStrict)
			}
			strict = i
		}
	}
	return nil
}

// Unknown are the rules the client does not know now, in order: those a
// reload removed since New checked them.
func Unknown(c *client.Client, rules []string) []string {
	var names []string
	for _, r := range rules {
		if _, ok := c.Rule(r); !ok {
			names = append(names, r)
		}
	}
	return names
}

// maxKey is the SDK's limit on a key's length (client.ErrInvalidKey).
const maxKey = 512

// BoundedKey joins prefix and v, hashing v when the key would not be one
// the SDK accepts (client.ErrInvalidKey): longer than 512 bytes, or not
// UTF-8 (a header or metadata value may hold any bytes). Such a key must
// still be limited, like any other, not fail.
func BoundedKey(prefix, v string) string {
	if len(prefix)+len(v) <= maxKey && utf8.ValidString(v) {
		return prefix + v
	}
	sum := sha256.Sum256([]byte(v))
	return prefix + "sha256:" + hex.EncodeToString(sum[:])
}

// ErrorLogs paces a middleware's error logs: an error that fails every
// request (an unknown rule) is logged a few times a minute, not once a
// request.
func ErrorLogs() rate.Sometimes { return rate.Sometimes{First: 3, Interval: 20 * time.Second} }
