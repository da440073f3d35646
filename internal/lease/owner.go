package lease

import (
	"math"
	"sync/atomic"
)

// What a key's owner says of it. A region's allocator leases its keys from
// its parent through keys of its own, and lends on what they hold to its
// nodes: it says what those nodes use, hold and ask, which the key's
// requests to the parent carry. A node's own keys have no owner and keep
// none of this (KeyLease.owner is nil).

// ownerSays is what an owner said of a key, each from the call that set it.
type ownerSays struct {
	usingN    atomic.Int32  // what its fallback may still use, as a divisor; 0: what it was told (SetUsing)
	heldBelow atomic.Int64  // what others hold of what it lent them (SetHeldBelow)
	demand    atomic.Uint64 // 1 + the bits of its demand, tokens/s (SetDemand); 0: unsaid
}

// says is what the key's owner says of it, made at the owner's first word.
func (k *KeyLease) says() *ownerSays {
	if o := k.owner.Load(); o != nil {
		return o
	}
	k.owner.CompareAndSwap(nil, &ownerSays{})
	return k.owner.Load()
}

// heldBelow is what the key's owner says is held below it (SetHeldBelow).
func (k *KeyLease) heldBelow() int64 {
	if o := k.owner.Load(); o != nil {
		return o.heldBelow.Load()
	}
	return 0
}

// SetUsing says that the key's fallback may still admit, until the owner
// says otherwise, as much as dividing the rule by n would: a region whose
// nodes were told their parts of an older, larger part of the rule. Its
// requests then say the smaller of n and what the allocator told it, so
// that the allocator counts it at what it may use, not at what it was
// last told (docs/bounds.md, rule 5). 0: what it was told.
func (k *KeyLease) SetUsing(n int) { k.says().usingN.Store(int32(min(max(n, 0), math.MaxInt32))) }

// SetHeldBelow says that n tokens the key's owner lent on out of its
// lease are still held unspent below it (a region's nodes): its requests
// say them held beside its own, so that the allocator's bucket refills
// only the room they leave (docs/bounds.md, rule 6), and say that it has
// held no more than that only from the request on (the owner does not
// know when they were spent). The key does not leave while they are held.
func (k *KeyLease) SetHeldBelow(n int64) { k.says().heldBelow.Store(max(n, 0)) }

// SetDemand says that the key's demand is rate tokens a second, as its
// owner measures it (a region: the sum of what its nodes say they are
// asked, LeaseRequest.demand), rather than what is taken from the key:
// an owner that lends on what it takes is asked in batches, refused ones
// again and again, which says nothing of its callers' rate. The key's
// requests then ask for a share of the rate by it and say it as their
// demand, and the key is not quiet while it is above zero. A share
// asleep wakes, to be renewed by it. A rate below zero (or NaN) takes back
// what the owner said: the key measures its own demand again.
func (k *KeyLease) SetDemand(rate float64) {
	if !(rate >= 0) {
		k.says().demand.Store(0)
	} else {
		k.says().demand.Store(1 + math.Float64bits(rate))
	}
	if k.is(bitAsleep) {
		k.WantRefill() // (wakes it: sleep.go)
	}
}

// ownerBusy reports whether the key's owner says it has demand.
func (k *KeyLease) ownerBusy() bool {
	d, ok := k.ownerDemand()
	return ok && d > 0
}

// ownerDemand is what the key's owner last said its demand is (SetDemand),
// ok false when it said nothing.
func (k *KeyLease) ownerDemand() (rate float64, ok bool) {
	o := k.owner.Load()
	if o == nil {
		return 0, false
	}
	v := o.demand.Load()
	if v == 0 {
		return 0, false
	}
	return math.Float64frombits(v - 1), true
}

// saysFallbackNodes is what the key's requests say its fallback divides
// by: what it was told, or what its owner says it still uses, if fewer.
func (k *KeyLease) saysFallbackNodes() int {
	told, using := k.FallbackNodes(), 0
	if o := k.owner.Load(); o != nil {
		using = int(o.usingN.Load())
	}
	if using > 0 && (told == 0 || using < told) {
		return using
	}
	return told
}
