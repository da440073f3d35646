// Package mutate puts back, on purpose and one at a time, faults that the
// code once had and the fleet simulator must find (its mutation test,
// internal/sim). Each is a switch that the code it concerns reads where the
// fix lies; all are off but in that test. FoundationDB's BUGGIFY is the
// habit: the switches cost one atomic load, and only off the hot path.
package mutate

import "sync/atomic"

// Mutation is one fault put back.
type Mutation uint32

// The faults the simulator must find (docs/simulation.md names what each
// is, and which run finds it).
const (
	// FallbackWhileServed: a key whose lease ended decides on its fallback
	// allowance while the allocator answers (a fixed window's node then
	// admits the rest of the store's window on its fallback).
	FallbackWhileServed Mutation = 1 << iota
	// FallbackInFlight: a new key decides on a full fallback allowance
	// while its first lease is on its way (a cold fleet spends a burst per
	// node).
	FallbackInFlight
	// WindowAsBucket: a window rule's fallback is a token bucket of
	// limit/N, not an allowance per store window.
	WindowAsBucket
	// CarryEarliest: tokens a new lease brings take the end of the oldest
	// lease whose tokens are left.
	CarryEarliest
	// SizeByHistory: a lease is sized by the key's demand estimate alone,
	// not doubled when it runs dry.
	SizeByHistory
	// ReturnGrant: a node gives back, with each request, as much as its
	// lease size, spent or not (it says truly what it holds).
	ReturnGrant
	// CreditLent: the store credits a return up to what it lent the
	// holder, whatever the holder says it holds unspent.
	CreditLent
	// ForgiveLate: the store forgives consumption reported late as repaid
	// by refill, and reserves nothing for a holder cut off on its fallback.
	ForgiveLate
	// OweWholeOverlap: a key whose share shrinks owes the difference over
	// the whole flight, whatever it admitted of it.
	OweWholeOverlap
	// TellHolders: the store tells each holder to divide its fallback by
	// the holders it counts, whatever the others were told before.
	TellHolders
	// RefillPastHeld: a token bucket refills to its burst whatever its
	// holders still hold of what it lent them.
	RefillPastHeld
	// SlotsPastMaxHold: a node takes slots on its lease until the lease
	// ends, not max_hold before: cut off, its last slots run past the
	// store's count of them, beside their next holder's.
	SlotsPastMaxHold
	// IgnoreSettled: the store takes nothing of a settled cost a node
	// reports, neither from a bucket nor into a window's count or a log:
	// a debt the callers ran up is forgiven the moment it is reported.
	IgnoreSettled
)

var on atomic.Uint32

// On reports whether m is put back.
func On(m Mutation) bool { return on.Load()&uint32(m) != 0 }

// Set puts back m (only m) and returns what undoes it.
func Set(m Mutation) (undo func()) {
	on.Store(uint32(m))
	return func() { on.Store(0) }
}
