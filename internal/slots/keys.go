package slots

import (
	"hash/maphash"
	"sync/atomic"
)

// keyMap is a table's keys: read without a lock on the hot path (one hash,
// one bucket load), written under Manager.mu. A bucket is an immutable
// slice replaced whole, and the bucket array is replaced whole when it
// grows, so a reader (or each) sees a whole one.
type keyMap struct {
	seed  maphash.Seed
	array atomic.Pointer[keyArray]
	count int
}

type keyArray struct {
	buckets []atomic.Pointer[[]*Key]
	mask    uint64
}

const (
	firstBuckets = 16
	perBucket    = 4 // keys a bucket holds, on average, before the array doubles
)

func newKeyMap() *keyMap {
	m := &keyMap{seed: maphash.MakeSeed()}
	m.array.Store(&keyArray{buckets: make([]atomic.Pointer[[]*Key], firstBuckets), mask: firstBuckets - 1})
	return m
}

func (m *keyMap) load(key string) *Key {
	a := m.array.Load()
	b := a.buckets[maphash.String(m.seed, key)&a.mask].Load()
	if b == nil {
		return nil
	}
	for _, k := range *b {
		if k.st.name == key {
			return k
		}
	}
	return nil
}

// store puts k in place of the key's, under Manager.mu.
func (m *keyMap) store(k *Key) {
	if m.count >= perBucket*len(m.array.Load().buckets) {
		m.grow()
	}
	a := m.array.Load()
	slot := &a.buckets[maphash.String(m.seed, k.st.name)&a.mask]
	var next []*Key
	if b := slot.Load(); b != nil {
		for _, o := range *b {
			if o.st.name == k.st.name {
				m.count--
				continue
			}
			next = append(next, o)
		}
	}
	next = append(next, k)
	slot.Store(&next)
	m.count++
}

// remove takes k out if it is the key's, under Manager.mu.
func (m *keyMap) remove(k *Key) {
	a := m.array.Load()
	slot := &a.buckets[maphash.String(m.seed, k.st.name)&a.mask]
	b := slot.Load()
	if b == nil {
		return
	}
	next := make([]*Key, 0, len(*b))
	for _, o := range *b {
		if o != k {
			next = append(next, o)
		}
	}
	m.count -= len(*b) - len(next)
	slot.Store(&next)
}

// each calls f on every key, under Manager.mu.
func (m *keyMap) each(f func(*Key)) {
	a := m.array.Load()
	for i := range a.buckets {
		if b := a.buckets[i].Load(); b != nil {
			for _, k := range *b {
				f(k)
			}
		}
	}
}

func (m *keyMap) grow() {
	old := m.array.Load()
	n := uint64(len(old.buckets)) * 2
	a := &keyArray{buckets: make([]atomic.Pointer[[]*Key], n), mask: n - 1}
	for i := range old.buckets {
		if b := old.buckets[i].Load(); b != nil {
			for _, k := range *b {
				slot := &a.buckets[maphash.String(m.seed, k.st.name)&a.mask]
				var next []*Key
				if p := slot.Load(); p != nil {
					next = append(next, *p...)
				}
				next = append(next, k)
				slot.Store(&next)
			}
		}
	}
	m.array.Store(a)
}
