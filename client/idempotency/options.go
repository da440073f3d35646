package idempotency

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures a Middleware. Exactly one of Store, Redis and
// RedisURL says where keys are kept; every other field's zero value takes
// DefaultOptions' value, which is set and explained there.
type Options struct {
	// Store keeps the keys: a RedisStore, a MemoryStore, or one of your
	// own that passes the package's conformance tests.
	Store Store
	// Redis is a client the middleware keeps keys through, as a
	// RedisStore; it is used, not closed.
	Redis redis.UniversalClient
	// RedisURL is a Redis for the middleware to dial itself
	// (redis://host:port/db or rediss:// for TLS, as redis.ParseURL reads
	// it); Middleware.Close closes that client.
	RedisURL string

	// KeyPrefix starts every key the middleware writes in the store, so
	// that several services may share one Redis.
	KeyPrefix string

	// Header names the request field that holds the key.
	Header string
	// Methods are those whose requests take a key; others pass through
	// untouched, as do requests without the field (see Require).
	Methods []string
	// Require refuses a request of Methods without a key with 400 Bad
	// Request, instead of serving it unprotected. default: false
	Require bool
	// MaxKeyLength is the longest key taken, in bytes; a longer one is
	// refused with 400.
	MaxKeyLength int

	// Scope is the caller the key belongs to, e.g. the authenticated
	// user or the API key, so that two callers who pick the same key do
	// not share it. It must not be something a caller can choose freely
	// (an unauthenticated header): then anyone who learns another's key
	// can read that caller's stored response. Requests for which Scope
	// returns "" share the global scope.
	// default: none; every key is global, which is safe only when keys
	// are unguessable (random UUIDs) and responses hold nothing private
	Scope func(r *http.Request) string

	// FingerprintHeaders are request fields that make two requests
	// different, beside the method, the path and query and the body
	// (Content-Type, say, or a tenant header). default: none
	FingerprintHeaders []string
	// MaxRequestBytes bounds the request body the middleware reads to
	// fingerprint it; a keyed request with a larger body is refused with
	// 413 Content Too Large before anything runs.
	MaxRequestBytes int64
	// MaxResponseBytes bounds the body stored for a replay. A larger
	// response still reaches its client, and the key stays spent: a retry
	// gets 409 saying the response was not kept, never a second run.
	MaxResponseBytes int

	// TTL is how long a stored response is replayed.
	TTL time.Duration
	// LockTTL is how long a running request's claim lasts unless its
	// process renews it; the middleware renews it every LockTTL/3 while
	// the handler runs. A process that crashes mid-handler holds the key
	// for at most LockTTL, and a retry after that runs the handler again.
	LockTTL time.Duration
	// Wait is how long a duplicate of a running request waits for it to
	// end (and then gets its response) before it is answered 409 Conflict.
	// default: 0, answer 409 at once
	Wait time.Duration
	// PollInterval is how often a waiting duplicate asks the store again.
	PollInterval time.Duration

	// Retryable reports whether a response releases the key rather than
	// being stored, so that a retry runs the handler again: by default,
	// 5xx and 429.
	Retryable func(status int) bool
	// FailOpen serves a request the store cannot claim a key for (Redis
	// down) as if it had no key, and logs it. default: false, refuse it
	// with 503, since serving it could run it twice
	FailOpen bool
	// StoreTimeout bounds each call to the store.
	StoreTimeout time.Duration

	// Logger receives store failures, a few a minute at most.
	// default: slog.Default()
	Logger *slog.Logger
}

// DefaultOptions is what a zero field of Options takes, each value with
// its reason; what it leaves unset (the store, Require, Scope,
// FingerprintHeaders, Wait, FailOpen) is off until set.
func DefaultOptions() Options {
	return Options{
		KeyPrefix:        "allot:idem:",                               // several services may share one Redis
		Header:           "Idempotency-Key",                           // draft-ietf-httpapi-idempotency-key-header's name
		Methods:          []string{http.MethodPost, http.MethodPatch}, // PUT and DELETE are idempotent already
		MaxKeyLength:     255,                                         // a UUID is 36; room for a client's own scheme
		MaxRequestBytes:  8 << 20,                                     // what an API's POST usually allows
		MaxResponseBytes: 1 << 20,                                     // a Redis value of 1 MiB is still cheap to move
		TTL:              24 * time.Hour,                              // the draft's suggestion; longer than any client's retries
		LockTTL:          30 * time.Second,                            // renewed while running: only a crash waits it out
		PollInterval:     50 * time.Millisecond,                       // a waiting duplicate learns of the end within a few ms of a typical handler's run
		Retryable:        defaultRetryable,                            // the request was not done, or not all of it
		StoreTimeout:     2 * time.Second,                             // a Redis across a region still answers; a hung one fails the request, not the service
		Logger:           slog.Default(),
	}
}

// withDefaults is opts with every zero field set, checked. A field out of
// range is an error naming it.
func (o Options) withDefaults() (Options, error) {
	stores := 0
	for _, set := range []bool{o.Store != nil, o.Redis != nil, o.RedisURL != ""} {
		if set {
			stores++
		}
	}
	if stores != 1 {
		return o, fmt.Errorf("idempotency: Options: set exactly one of Store, Redis and RedisURL (%d set)", stores)
	}
	d := DefaultOptions()
	if o.KeyPrefix == "" {
		o.KeyPrefix = d.KeyPrefix
	}
	if o.Header == "" {
		o.Header = d.Header
	}
	o.Header = textproto.CanonicalMIMEHeaderKey(o.Header)
	if o.Methods == nil {
		o.Methods = d.Methods
	}
	hdrs := make([]string, len(o.FingerprintHeaders))
	for i, h := range o.FingerprintHeaders {
		hdrs[i] = textproto.CanonicalMIMEHeaderKey(h)
	}
	o.FingerprintHeaders = hdrs
	if o.Retryable == nil {
		o.Retryable = d.Retryable
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	var errs []error
	setInt(&o.MaxKeyLength, d.MaxKeyLength, "MaxKeyLength", &errs)
	setInt(&o.MaxRequestBytes, d.MaxRequestBytes, "MaxRequestBytes", &errs)
	setInt(&o.MaxResponseBytes, d.MaxResponseBytes, "MaxResponseBytes", &errs)
	setInt(&o.TTL, d.TTL, "TTL", &errs)
	setInt(&o.LockTTL, d.LockTTL, "LockTTL", &errs)
	setInt(&o.Wait, 0, "Wait", &errs)
	setInt(&o.PollInterval, d.PollInterval, "PollInterval", &errs)
	setInt(&o.StoreTimeout, d.StoreTimeout, "StoreTimeout", &errs)
	if o.LockTTL > 0 && o.LockTTL < 3*time.Millisecond {
		errs = append(errs, fmt.Errorf("LockTTL is %v; at least 3ms, since it is renewed every third", o.LockTTL))
	}
	if len(o.Methods) == 0 {
		errs = append(errs, errors.New("an empty Methods takes no method; leave it nil for POST and PATCH"))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("idempotency: Options: %w", err)
	}
	return o, nil
}

// setInt puts def in a zero *v and reports a negative one.
func setInt[T int | int64 | time.Duration](v *T, def T, name string, errs *[]error) {
	switch {
	case *v < 0:
		*errs = append(*errs, fmt.Errorf("%s is %v; it must not be negative", name, *v))
	case *v == 0:
		*v = def
	}
}

func defaultRetryable(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}
