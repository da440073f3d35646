package lease

import (
	"sync/atomic"

	"github.com/allot-dev/allot/internal/rules"
)

// Table holds the pools of one rule. Lookups take no lock (see keyMap).
type Table struct {
	m    *Manager
	name string
	rule atomic.Pointer[rules.Rule]
	keys *keyMap
	gone atomic.Bool
	// warnedTTL: the rule's TTL was found too short for the round trip, and
	// said so once.
	warnedTTL atomic.Bool
}

// Rule is the table's current rule.
func (t *Table) Rule() *rules.Rule { return t.rule.Load() }

// Pool returns the key's pool, creating it (and asking for its first lease)
// when the key is new, or nil when the key is new and the node already
// holds Config.MaxKeys pools.
func (t *Table) Pool(key string) *Pool {
	if p := t.keys.load(key); p != nil {
		return p
	}
	m := t.m
	if m.keys.Add(1) > int64(m.cfg.MaxKeys) {
		m.keys.Add(-1)
		if p := t.keys.load(key); p != nil {
			return p
		}
		m.overCap.Add(1)
		return nil
	}
	p, loaded := t.keys.loadOrStore(key, &Pool{table: t, key: key})
	if loaded {
		m.keys.Add(-1)
		return p
	}
	p.WantRefill()
	return p
}

// Lookup returns the key's pool, or nil when the key has none yet.
func (t *Table) Lookup(key string) *Pool { return t.keys.load(key) }

// Len counts the table's pools.
func (t *Table) Len() int { return t.keys.len() }

func (t *Table) each(f func(*Pool)) { t.keys.each(f) }
