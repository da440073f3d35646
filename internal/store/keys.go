package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrFull is returned, wrapped in a *FullError, for a call on a new key
// when the store holds as many keys as its cap allows.
var ErrFull = errors.New("store: full")

// FullError says which call found the store full, and how full.
type FullError struct {
	// Store is "memory" or "redis": whose cap it is.
	Store string
	// Request is the index of the refused request in an Acquire batch
	// (the memory store applied the ones before it); 0 for Check.
	Request int
	Keys    int64 // keys held
	Max     int64 // the cap
}

func (e *FullError) Error() string {
	return fmt.Sprintf("%v: %d keys held, the cap is %d; a new key is refused until some expire", ErrFull, e.Keys, e.Max)
}

// Is makes errors.Is(err, ErrFull) hold.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// KeyCounter is a store with a cap on its keys: what it holds and refused.
type KeyCounter interface {
	// Keys is the number of keys held (for Redis, the database's size at
	// its last poll).
	Keys() int64
	// MaxKeys is the cap; 0: none.
	MaxKeys() int64
	// Refused counts the calls refused at the cap.
	Refused() uint64
}

// Exister tells which requests' keys have state in the store: the
// allocator counts a node's new keys with it.
type Exister interface {
	Exists(ctx context.Context, reqs []AcquireRequest) ([]bool, error)
}

// firstNew is the index of the first false in exists, -1 if none.
func firstNew(exists []bool) int {
	for i, ok := range exists {
		if !ok {
			return i
		}
	}
	return -1
}
