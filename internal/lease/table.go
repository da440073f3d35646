package lease

import (
	"sync"
	"sync/atomic"

	"github.com/allot-dev/allot/internal/rules"
)

// Table holds the pools of one rule. Lookups take no lock: sync.Map serves
// reads from an immutable part and string keys do not allocate.
type Table struct {
	m    *Manager
	name string
	rule atomic.Pointer[rules.Rule]
	keys sync.Map // string -> *Pool
	gone atomic.Bool
}

// Rule is the table's current rule.
func (t *Table) Rule() *rules.Rule { return t.rule.Load() }

// Pool returns the key's pool, creating it (and asking for its first lease)
// when the key is new.
func (t *Table) Pool(key string) *Pool {
	if v, ok := t.keys.Load(key); ok {
		return v.(*Pool)
	}
	p := &Pool{table: t, key: key}
	v, loaded := t.keys.LoadOrStore(key, p)
	if !loaded {
		p.WantRefill()
	}
	return v.(*Pool)
}

// Len counts the table's pools.
func (t *Table) Len() int {
	n := 0
	t.keys.Range(func(_, _ any) bool { n++; return true })
	return n
}

func (t *Table) each(f func(*Pool)) {
	t.keys.Range(func(_, v any) bool { f(v.(*Pool)); return true })
}
