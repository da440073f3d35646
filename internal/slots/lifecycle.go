package slots

import (
	"math"
	"time"
)

// A key's cap when its lease does not hold (settle), and its end: idle, or
// its rule gone (drop).

// dropGone drops, under m.mu, the keys of forgotten rules whose slots were
// in flight when their rule went, as their last slots come back.
func (m *Manager) dropGone(now time.Duration) []Request {
	var rets []Request
	kept := m.gone[:0]
	for _, t := range m.gone {
		left := false
		t.keys.each(func(k *Key) {
			if ret, ok := m.drop(t, k, now, dropClosed); ok {
				rets = append(rets, ret)
			} else if !k.Dead() {
				left = true
			}
		})
		if left {
			kept = append(kept, t)
		}
	}
	m.gone = kept
	return rets
}

// allocatorIs says whether the allocator answers, as settle needs it.
type allocatorIs bool

const (
	allocatorAnswers allocatorIs = false
	allocatorAway    allocatorIs = true
)

// settle sets the cap of a key whose lease does not hold: its fallback
// while the allocator is away, else nothing until its next answer.
func (m *Manager) settle(k *Key, now time.Duration, allocator allocatorIs) {
	if k.st.leased(now) || !k.st.answered {
		return
	}
	k.ceil.Store(math.MaxInt64)
	if allocator == allocatorAway {
		k.setCap(fallbackCap(k.st.rule, m.cfg.Nodes()), ModeFallback)
		return
	}
	k.setCap(0, ModeLease)
}

// idle reports whether the key has had nothing in flight nor asked for
// for a lease TTL: its slots may go back.
func (m *Manager) idle(k *Key, now time.Duration) bool {
	if k.InFlight() > 0 || k.st.busy || k.st.asking {
		k.st.idleSince = 0
		return false
	}
	if k.st.idleSince == 0 {
		k.st.idleSince = now
	}
	return now-k.st.idleSince >= k.st.rule.Lease.TTL
}

// dropping says what a key kept by drop (it has slots in flight) may do.
type dropping uint8

const (
	dropIdle   dropping = iota // an idle key: kept as it is, should it have slots in flight
	dropClosed                 // its rule went, or the node closes: kept, it takes no more
)

// drop forgets a key, under m.mu, and returns the release of its slots if
// the store still holds some. A key with slots in flight is kept, taking
// more or not as how says.
func (m *Manager) drop(t *Table, k *Key, now time.Duration, how dropping) (Request, bool) {
	if how == dropClosed {
		k.setCap(0, k.Mode())
	}
	if w := k.word.Load(); w&inFlightMask > 0 || !k.word.CompareAndSwap(w, w&^(inFlightMask<<capShift)) {
		return Request{}, false
	}
	k.dead.Store(true)
	t.keys.remove(k)
	m.keys.Add(-1)
	refs.remove(k.ref)
	if k.st.held > 0 && k.st.recorded(now) {
		return Request{Rule: k.st.rule.Name, Key: k.st.name}, true
	}
	return Request{}, false
}
