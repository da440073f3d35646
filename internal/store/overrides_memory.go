package store

import (
	"context"
	"sync"

	"github.com/allot-dev/allot/internal/rules"
)

// MemoryOverrides keeps overrides in the process, for an allocator on the
// embedded store (or on a store of a test's): they live as long as the
// process, and no other allocator sees them.
type MemoryOverrides struct {
	mu     sync.Mutex
	byRule map[string]*memoryRuleOverrides
}

type memoryRuleOverrides struct {
	version int64
	byKey   map[string]string // encoded, as Redis keeps them
}

// NewMemoryOverrides returns an empty MemoryOverrides.
func NewMemoryOverrides() *MemoryOverrides {
	return &MemoryOverrides{byRule: map[string]*memoryRuleOverrides{}}
}

func (m *MemoryOverrides) rule(name string) *memoryRuleOverrides {
	r := m.byRule[name]
	if r == nil {
		r = &memoryRuleOverrides{byKey: map[string]string{}}
		m.byRule[name] = r
	}
	return r
}

// PutOverride implements Overrides.
func (m *MemoryOverrides) PutOverride(ctx context.Context, o rules.RuntimeOverride, max int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rule(o.Rule)
	if _, ok := r.byKey[o.Key]; !ok && len(r.byKey) >= max {
		return 0, ErrOverridesFull
	}
	r.byKey[o.Key] = encodeOverride(&o)
	r.version++
	return r.version, nil
}

// DeleteOverride implements Overrides.
func (m *MemoryOverrides) DeleteOverride(ctx context.Context, rule, key string) (rules.RuntimeOverride, bool, error) {
	return m.delete(ctx, rule, key, "")
}

// ExpireOverride implements Overrides.
func (m *MemoryOverrides) ExpireOverride(ctx context.Context, o rules.RuntimeOverride) (bool, error) {
	_, ok, err := m.delete(ctx, o.Rule, o.Key, encodeOverride(&o))
	return ok, err
}

// delete removes key's override, if it is want when want is set.
func (m *MemoryOverrides) delete(ctx context.Context, rule, key, want string) (rules.RuntimeOverride, bool, error) {
	if err := ctx.Err(); err != nil {
		return rules.RuntimeOverride{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rule(rule)
	old, ok := r.byKey[key]
	if !ok || want != "" && old != want {
		return rules.RuntimeOverride{}, false, nil
	}
	delete(r.byKey, key)
	r.version++
	o, err := decodeOverride(rule, key, old)
	return o, true, err
}

// OverrideVersions implements Overrides.
func (m *MemoryOverrides) OverrideVersions(ctx context.Context, names []string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(names))
	for i, name := range names {
		if r := m.byRule[name]; r != nil {
			out[i] = r.version
		}
	}
	return out, nil
}

// LoadOverrides implements Overrides.
func (m *MemoryOverrides) LoadOverrides(ctx context.Context, rule string) (int64, []rules.RuntimeOverride, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byRule[rule]
	if r == nil {
		return 0, nil, nil
	}
	out := make([]rules.RuntimeOverride, 0, len(r.byKey))
	for key, s := range r.byKey {
		o, err := decodeOverride(rule, key, s)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, o)
	}
	return r.version, out, nil
}
