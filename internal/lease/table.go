package lease

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/allot-dev/allot/internal/rules"
)

// Table holds the keys of one rule. Lookups take no lock (see keyMap).
type Table struct {
	c    *Core
	name string
	rule atomic.Pointer[rules.Rule]
	keys *keyMap
	gone atomic.Bool
}

// Rule is the table's current rule.
func (t *Table) Rule() *rules.Rule { return t.rule.Load() }

// Name is the rule's name.
func (t *Table) Name() string { return t.name }

// Key returns the key's lease, making it (and asking for its first lease)
// when the key is new, or nil when the key is new and the node already
// holds Config.MaxKeys keys.
func (t *Table) Key(key string) *KeyLease {
	if k := t.keys.load(key); k != nil {
		return k
	}
	c := t.c
	if c.keys.Add(1) > int64(c.cfg.MaxKeys) {
		c.keys.Add(-1)
		if k := t.keys.load(key); k != nil {
			return k
		}
		c.over.Add(1)
		return nil
	}
	k, loaded := t.keys.loadOrStore(key, &KeyLease{table: t, key: key})
	if loaded {
		c.keys.Add(-1)
		return k
	}
	k.WantRefill()
	return k
}

// Lookup returns the key's lease, or nil when it has none yet.
func (t *Table) Lookup(key string) *KeyLease { return t.keys.load(key) }

// Len counts the table's keys.
func (t *Table) Len() int { return t.keys.len() }

// sorted is the table's keys in key order: the Core visits them in an
// order that does not depend on the map's hash seed, so that a seeded
// Core repeats itself exactly.
func (t *Table) sorted() []*KeyLease {
	var out []*KeyLease
	t.keys.each(func(k *KeyLease) { out = append(out, k) })
	slices.SortFunc(out, func(a, b *KeyLease) int { return strings.Compare(a.key, b.key) })
	return out
}
