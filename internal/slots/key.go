// Package slots keeps a node's slots of concurrency rules: what it may run
// at once on each (rule, key), leased from the allocator, and its
// fallback of limit/N while the allocator is away. Its hot path (Take,
// Give) is two atomic steps; the Manager's loop does the rest.
package slots

import (
	"math"
	"sync/atomic"
	"time"
)

// Mode says where a key's slots come from.
type Mode uint32

const (
	// ModeLease: slots the allocator lent this node.
	ModeLease Mode = iota + 1
	// ModeFallback: the node's fallback of limit/N, the allocator away.
	ModeFallback
)

// Key is one (rule, key)'s slots on this node. Its word packs the slots
// the node may have in flight (its cap: the lease's, the fallback's or 0)
// with those in flight, so that a take is one compare-and-swap and can
// never pass the cap, however the loop moves it; and a count of releases,
// wrapping, that the loop reads for the rate of them.
type Key struct {
	word atomic.Uint64 // releases<<48 | cap<<24 | in flight
	// ceil is the node's share of the slots: a release while the cap is
	// above it shrinks the cap, giving the slot up rather than back to
	// the lease, so that a node above its share drains to it.
	ceil    atomic.Int64
	givenUp atomic.Int64  // slots given up so, ever: the loop tells a call's answer those since it was sent
	peak    atomic.Int64  // most in flight since the loop last looked (0: no take)
	refused atomic.Int64  // takes refused since the loop last looked
	mode    atomic.Uint32 // Mode of the cap
	hold    atomic.Int64  // observed mean hold, ns: RetryAfter's
	touched atomic.Bool   // a take refused since the loop last looked
	dead    atomic.Bool   // the manager forgot it: look the key up again
	ref     uint32        // its number (refs.go)

	st state // the loop's, under Manager.mu
}

const (
	inFlightMask = 1<<24 - 1 // also the largest cap
	capShift     = 24
	releaseShift = 48
	releaseMask  = 1<<16 - 1
	// giveOne takes one slot out of flight and counts a release: the
	// count, at the top of the word, wraps out of it.
	giveOne = 1<<releaseShift - 1
)

func capOf(w uint64) uint64 { return w >> capShift & inFlightMask }

// releases is the word's count of releases, wrapping at 2^16: the loop
// looks far more often than that many go by.
func releases(w uint64) uint64 { return w >> releaseShift }

func newKey() *Key {
	k := &Key{}
	k.ceil.Store(math.MaxInt64)
	return k
}

// Take takes a slot if one is free under the cap.
func (k *Key) Take() bool {
	for {
		w := k.word.Load()
		if w&inFlightMask >= capOf(w) {
			k.refused.Add(1)
			if !k.touched.Load() {
				k.touched.Store(true)
			}
			return false
		}
		if k.word.CompareAndSwap(w, w+1) {
			if n := int64(w&inFlightMask) + 1; n > k.peak.Load() {
				k.peak.Store(n)
			}
			return true
		}
	}
}

// Give gives a slot back: to the lease, or, while the cap is above the
// node's share, up (the cap shrinks with it).
func (k *Key) Give() {
	ceil := k.ceil.Load()
	if w := k.word.Load(); int64(capOf(w)) <= ceil {
		k.word.Add(giveOne) // (a cap that moved meanwhile drains at the next)
		return
	}
	for {
		w := k.word.Load()
		next := w + giveOne
		up := int64(capOf(w)) > ceil
		if up {
			next -= 1 << capShift
		}
		if k.word.CompareAndSwap(w, next) {
			if up {
				k.givenUp.Add(1)
			}
			return
		}
	}
}

// InFlight is the slots taken and not given back.
func (k *Key) InFlight() int64 { return int64(k.word.Load() & inFlightMask) }

// Cap is the slots the node may have in flight.
func (k *Key) Cap() int64 { return int64(capOf(k.word.Load())) }

// Mode is where the cap comes from.
func (k *Key) Mode() Mode { return Mode(k.mode.Load()) }

// Dead reports whether the manager forgot the key.
func (k *Key) Dead() bool { return k.dead.Load() }

// RetryAfter is how long a refused take should wait: the mean time a slot
// of the key is held, as observed (Little's law: in flight over the rate of
// releases), or fallback when nothing is known yet.
func (k *Key) RetryAfter(fallback time.Duration) time.Duration {
	if h := time.Duration(k.hold.Load()); h > 0 {
		return h
	}
	return fallback
}

// setCap sets the cap to c, and returns it. A cap below the slots in
// flight takes none until they drain below it: a lease's cap is never
// raised to slots it did not lend (its fallback's, still running when the
// lease came).
func (k *Key) setCap(c int64, m Mode) int64 {
	c = min(max(c, 0), inFlightMask)
	for {
		w := k.word.Load()
		if k.word.CompareAndSwap(w, w&^(inFlightMask<<capShift)|uint64(c)<<capShift) {
			k.mode.Store(uint32(m))
			return c
		}
	}
}
