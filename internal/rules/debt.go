package rules

import (
	"fmt"
	"strings"
)

// MaxDebtOf returns a pointer to n, for Rule.MaxDebt.
func MaxDebtOf(n int64) *int64 { return &n }

// Debt is the most a key may owe under r: what settled costs may take from
// its bucket beyond what it holds (client.Reservation.Settle). The file's
// max_debt, else one burst for a token bucket, whose refill repays it, and
// none for a window rule, which then never counts more than its limit in a
// window unless its file says so. A default debt follows an override's
// burst; one the file gives is the same for every key.
func (r *Rule) Debt() int64 {
	switch {
	case r.MaxDebt != nil:
		return *r.MaxDebt
	case r.Algorithm == TokenBucket:
		return r.Burst
	}
	return 0
}

func (r *Rule) normalizeDebt(bad func(string, string, ...any) error) error {
	if r.MaxDebt != nil && (*r.MaxDebt < 0 || *r.MaxDebt > MaxLimit) {
		return bad("max_debt", "must be between 0 and %d, got %d", MaxLimit, *r.MaxDebt)
	}
	return nil
}

// digestDebt leaves a rule without max_debt with the digest it had before
// the field existed, so that allocators of both versions serving one file
// during a rolling upgrade tell their nodes the same rules version.
func digestDebt(s string, maxDebt *int64) string {
	s = strings.Replace(s, " MaxDebt:<nil>", "", 1)
	if maxDebt != nil {
		s += fmt.Sprintf(" max_debt:%d", *maxDebt)
	}
	return s
}

func copyDebt(p *int64) *int64 {
	if p == nil {
		return nil
	}
	return MaxDebtOf(*p)
}
