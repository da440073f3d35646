package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// Overrides keeps the per-key overrides set at runtime, through the
// allocator's Admin service: configuration, not state, so kept without a
// TTL until deleted (an expired one is deleted by the allocators, see
// ExpireOverride). Each rule's overrides carry a version that every change
// moves, so that allocators sharing the store learn of a change by reading
// one number a rule, and read the overrides only when it moved.
type Overrides interface {
	// PutOverride stores o, replacing o.Key's override of o.Rule, and
	// returns the rule's new version. A rule holds at most max
	// overrides: one more is ErrOverridesFull.
	PutOverride(ctx context.Context, o rules.RuntimeOverride, max int) (version int64, err error)
	// DeleteOverride removes key's override of rule and returns it; ok is
	// false when there was none.
	DeleteOverride(ctx context.Context, rule, key string) (old rules.RuntimeOverride, ok bool, err error)
	// ExpireOverride removes o.Key's override of o.Rule if it is still o:
	// allocators tidy up expired overrides with it, and one set again
	// meanwhile must stay.
	ExpireOverride(ctx context.Context, o rules.RuntimeOverride) (bool, error)
	// OverrideVersions is the version of each rule's overrides, in order:
	// 0 for a rule that never had one.
	OverrideVersions(ctx context.Context, rules []string) ([]int64, error)
	// LoadOverrides is a rule's overrides, in no order, and their version,
	// read at one instant.
	LoadOverrides(ctx context.Context, rule string) (version int64, ovs []rules.RuntimeOverride, err error)
}

// ErrOverridesFull is PutOverride's error when the rule holds its most
// overrides already.
var ErrOverridesFull = errors.New("store: the rule holds its most overrides")

// OverridesOf is where the allocator keeps overrides on s: in s itself
// when it can share them (Redis), else in the process, and shared says
// which. An in-process override lives as long as the process.
func OverridesOf(s Store) (o Overrides, shared bool) {
	if o, ok := s.(Overrides); ok {
		return o, true
	}
	return NewMemoryOverrides(), false
}

// overrideRecord is an override as the store writes it; the rule and the
// key are where it is written. Times are whole milliseconds, so that a
// record read back encodes to the same bytes (ExpireOverride compares
// them).
type overrideRecord struct {
	Limit   int64  `json:"limit"`
	Burst   int64  `json:"burst,omitempty"`
	Expires int64  `json:"expires_ms,omitempty"`
	SetBy   string `json:"set_by,omitempty"`
	SetAt   int64  `json:"set_at_ms,omitempty"`
	Note    string `json:"note,omitempty"`
}

func encodeOverride(o *rules.RuntimeOverride) string {
	rec := overrideRecord{Limit: o.Limit, Burst: o.Burst, Expires: unixMilli(o.Expires), SetBy: o.SetBy,
		SetAt: unixMilli(o.SetAt), Note: o.Note}
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err) // a struct of numbers and strings always encodes
	}
	return string(b)
}

func decodeOverride(rule, key, s string) (rules.RuntimeOverride, error) {
	var rec overrideRecord
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return rules.RuntimeOverride{}, fmt.Errorf("store: override of key %q of rule %q: %w", key, rule, err)
	}
	return rules.RuntimeOverride{Rule: rule, Key: key, Limit: rec.Limit, Burst: rec.Burst, Expires: fromMilli(rec.Expires),
		SetBy: rec.SetBy, SetAt: fromMilli(rec.SetAt), Note: rec.Note}, nil
}

// unixMilli is t in milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
