package lease

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keyMap maps key names to their leases for the hot path: a lookup is one string hash,
// two atomic loads and a short scan, with no lock and no allocation.
// Buckets are immutable slices replaced whole under mu (copy on write), and
// the bucket array is rebuilt under mu when it gets crowded; a reader on an
// old array misses at most keys added since, and Table.Key re-checks under mu.
type keyMap struct {
	seed  maphash.Seed
	mu    sync.Mutex
	count int
	array atomic.Pointer[bucketArray] // the buckets
}

type bucketArray struct {
	mask    uint64
	buckets []atomic.Pointer[[]*KeyLease]
}

const (
	initialBuckets = 64
	maxPerBucket   = 4 // grow when the average bucket holds more
)

func newKeyMap() *keyMap {
	m := &keyMap{seed: maphash.MakeSeed()}
	m.array.Store(newBucketArray(initialBuckets))
	return m
}

func newBucketArray(n int) *bucketArray {
	return &bucketArray{mask: uint64(n - 1), buckets: make([]atomic.Pointer[[]*KeyLease], n)}
}

func (m *keyMap) load(key string) *KeyLease {
	t := m.array.Load()
	b := t.buckets[maphash.String(m.seed, key)&t.mask].Load()
	if b == nil {
		return nil
	}
	for _, p := range *b {
		if p.key == key {
			return p
		}
	}
	return nil
}

// loadOrStore returns the key's key, storing p when there is none.
func (m *keyMap) loadOrStore(key string, p *KeyLease) (actual *KeyLease, loaded bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.load(key); q != nil {
		return q, true
	}
	if m.count >= maxPerBucket*len(m.array.Load().buckets) {
		m.grow()
	}
	t := m.array.Load()
	slot := &t.buckets[maphash.String(m.seed, key)&t.mask]
	var next []*KeyLease
	if b := slot.Load(); b != nil {
		next = append(make([]*KeyLease, 0, len(*b)+1), *b...)
	}
	next = append(next, p)
	slot.Store(&next)
	m.count++
	return p, false
}

// remove deletes the key if it still maps to p.
func (m *keyMap) remove(key string, p *KeyLease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.array.Load()
	slot := &t.buckets[maphash.String(m.seed, key)&t.mask]
	b := slot.Load()
	if b == nil {
		return
	}
	for i, q := range *b {
		if q == p {
			if len(*b) == 1 {
				slot.Store(nil)
			} else {
				next := make([]*KeyLease, 0, len(*b)-1)
				next = append(append(next, (*b)[:i]...), (*b)[i+1:]...)
				slot.Store(&next)
			}
			m.count--
			// A map emptied of most of its keys gives its buckets back.
			if n := len(t.buckets); n > initialBuckets && m.count*maxPerBucket*8 < n {
				m.resize(n / 4)
			}
			return
		}
	}
}

func (m *keyMap) grow() { m.resize(2 * len(m.array.Load().buckets)) }

// resize rebuilds the bucket array with n buckets.
func (m *keyMap) resize(n int) {
	old := m.array.Load()
	t := newBucketArray(max(n, initialBuckets))
	for i := range old.buckets {
		if b := old.buckets[i].Load(); b != nil {
			for _, p := range *b {
				slot := &t.buckets[maphash.String(m.seed, p.key)&t.mask]
				var next []*KeyLease
				if cur := slot.Load(); cur != nil {
					next = *cur
				}
				next = append(next, p)
				slot.Store(&next)
			}
		}
	}
	m.array.Store(t)
}

// each calls f on every key; keys added meanwhile may be missed.
func (m *keyMap) each(f func(*KeyLease)) {
	t := m.array.Load()
	for i := range t.buckets {
		if b := t.buckets[i].Load(); b != nil {
			for _, p := range *b {
				f(p)
			}
		}
	}
}

func (m *keyMap) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count
}
