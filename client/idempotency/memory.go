package idempotency

import (
	"context"
	"sync"
	"time"
)

// MemoryStore is a Store in this process's memory: right for one process,
// wrong for a fleet, where each process would keep its own keys and a
// retry that reaches another one would run the handler again. Expired keys
// are dropped as they are met and in a sweep at most once a minute. It is
// safe for concurrent use; the zero value is not, call NewMemoryStore.
type MemoryStore struct {
	mu        sync.Mutex
	keys      map[string]*memEntry
	now       func() time.Time // tests step it
	nextSweep time.Time
}

type memEntry struct {
	token       string // the claim's, while in progress
	fingerprint string
	rec         *Record // nil while in progress
	expires     time.Time
}

// sweepEvery bounds how often Claim walks every key to drop expired ones.
const sweepEvery = time.Minute

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{keys: map[string]*memEntry{}, now: time.Now}
}

// Claim implements Store, under the store's lock.
func (m *MemoryStore) Claim(_ context.Context, key, token, fingerprint string, lockTTL time.Duration) (Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.sweepLocked(now)
	if e := m.liveLocked(key, now); e != nil {
		if e.rec != nil {
			return Claim{State: Done, Fingerprint: e.fingerprint, Record: e.rec}, nil
		}
		return Claim{State: InProgress, Fingerprint: e.fingerprint}, nil
	}
	m.keys[key] = &memEntry{token: token, fingerprint: fingerprint, expires: now.Add(lockTTL)}
	return Claim{State: Claimed, Fingerprint: fingerprint}, nil
}

// Extend implements Store.
func (m *MemoryStore) Extend(_ context.Context, key, token string, lockTTL time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e := m.heldLocked(key, token, now)
	if e == nil {
		return ErrClaimLost
	}
	e.expires = now.Add(lockTTL)
	return nil
}

// Complete implements Store. The record is kept as it is, not copied: the
// middleware does not change a record once it has handed it over.
func (m *MemoryStore) Complete(_ context.Context, key, token string, rec *Record, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e := m.heldLocked(key, token, now)
	if e == nil {
		return ErrClaimLost
	}
	e.token, e.rec, e.expires = "", rec, now.Add(ttl)
	return nil
}

// Release implements Store.
func (m *MemoryStore) Release(_ context.Context, key, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.heldLocked(key, token, m.now()) != nil {
		delete(m.keys, key)
	}
	return nil
}

// Len is the number of keys held, expired ones not yet dropped included.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

// liveLocked is key's entry, unless it has expired (then it is dropped).
func (m *MemoryStore) liveLocked(key string, now time.Time) *memEntry {
	e := m.keys[key]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		delete(m.keys, key)
		return nil
	}
	return e
}

// heldLocked is key's entry while token's claim holds it.
func (m *MemoryStore) heldLocked(key, token string, now time.Time) *memEntry {
	e := m.liveLocked(key, now)
	if e == nil || e.rec != nil || e.token != token {
		return nil
	}
	return e
}

func (m *MemoryStore) sweepLocked(now time.Time) {
	if now.Before(m.nextSweep) {
		return
	}
	m.nextSweep = now.Add(sweepEvery)
	for k, e := range m.keys {
		if !now.Before(e.expires) {
			delete(m.keys, k)
		}
	}
}
