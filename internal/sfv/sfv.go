// Package sfv owns what the HTTP rate-limit fields of httplimit and the
// Envoy service's headers share: structured-field Strings (RFC 9651) and
// durations in whole seconds, rounded up.
package sfv

import (
	"strings"
	"time"
)

// WriteString writes s as a structured-field String (RFC 9651 §3.3.3):
// quoted, with '"' and '\' escaped. Characters a String cannot hold
// (outside printable ASCII) are dropped.
func WriteString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c <= 0x7e:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// CeilSeconds is d in whole seconds, rounded up: a client told to wait
// less than it must would only be refused again. Zero for d ≤ 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second) // not (d + 1s - 1ns) / 1s: that overflows near the largest Duration
	if d%time.Second != 0 {
		s++
	}
	return s
}
