package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// Store keeps keys, their claims and their responses. Claim is the one
// step that must be atomic: two requests with one key, on any number of
// processes sharing the store, must never both be told Claimed. The
// middleware gives every method an opaque key (a hash of the scope and the
// Idempotency-Key, with Options.KeyPrefix) and a token it made for the
// claim; Extend, Complete and Release act only while that token still holds
// the key, so that a request whose claim expired cannot overwrite, or
// delete, the claim of the request that took the key over.
//
// RedisStore and MemoryStore are the two the package provides; both pass
// the same conformance tests.
type Store interface {
	// Claim takes key for token for lockTTL when nobody holds it, and
	// otherwise says who does: a request still running, or a stored
	// response.
	Claim(ctx context.Context, key, token, fingerprint string, lockTTL time.Duration) (Claim, error)
	// Extend keeps token's claim on key for lockTTL more, while its
	// handler runs. It returns ErrClaimLost when token no longer holds key.
	Extend(ctx context.Context, key, token string, lockTTL time.Duration) error
	// Complete stores rec as key's response for ttl, in place of token's
	// claim. It returns ErrClaimLost when token no longer holds key.
	Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error
	// Release deletes token's claim on key, so that a retry runs the
	// handler. Releasing a claim token no longer holds does nothing.
	Release(ctx context.Context, key, token string) error
}

// State is what Claim found.
type State uint8

const (
	// Claimed: the key was free and is now the caller's; run the handler.
	Claimed State = iota + 1
	// InProgress: another request holds the key and is still running.
	InProgress
	// Done: the key holds a response, in Claim.Record.
	Done
)

func (s State) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case InProgress:
		return "in progress"
	case Done:
		return "done"
	}
	return "unknown"
}

// Claim is what Store.Claim found under a key.
type Claim struct {
	State State
	// Fingerprint is the fingerprint of the request that holds the key
	// (InProgress, Done), for the middleware to tell a retry from a
	// different request; the caller's own when Claimed.
	Fingerprint string
	// Record is the stored response when Done.
	Record *Record
}

// Record is a stored response.
type Record struct {
	// Fingerprint is the fingerprint of the request that made it.
	Fingerprint string
	Status      int
	Header      http.Header
	Body        []byte
	// Truncated: the body was larger than Options.MaxResponseBytes, so
	// none of it is kept and the response cannot be replayed (a retry gets
	// 409; docs/idempotency.md says why). Body is empty.
	Truncated bool
}

// ErrClaimLost is returned by Extend and Complete when the token no longer
// holds the key: its claim expired (Options.LockTTL) and the key was freed,
// or claimed by another request.
var ErrClaimLost = errors.New("idempotency: the claim on the key was lost (its lock expired)")

// ErrStore wraps a store failure the middleware reports: Redis
// unreachable, a timeout, a stored record that does not decode.
var ErrStore = errors.New("idempotency: store failed")

// newToken is a claim's token: random, so that no two claims share one.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
