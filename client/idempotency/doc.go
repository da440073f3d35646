// Package idempotency is net/http middleware that makes unsafe requests
// safe to retry: it owns the Idempotency-Key header, the atomic claim of a
// key, and the stored response a retry gets back instead of a second run.
//
// A client sends a key of its choosing with a POST (or PATCH, or any
// method in Options.Methods), as draft-ietf-httpapi-idempotency-key-header
// names it:
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// The first request with a key claims it, atomically, in a Store (Redis,
// for a fleet; an in-process map, for one process), runs the handler and
// stores the response: status, headers and body, under the key, with a
// fingerprint of the request (method, path and query, a hash of the body,
// and the headers in Options.FingerprintHeaders). Then, for as long as the
// key lives (Options.TTL, 24 hours by default):
//
//   - the same key with the same request gets the stored response again,
//     marked Idempotent-Replayed: true, and the handler does not run;
//   - the same key with a different request gets 422 Unprocessable Content;
//   - the same key while the first request still runs gets 409 Conflict
//     with Retry-After (or, with Options.Wait, waits for the first to end);
//   - a handler that answers 5xx or 429, or panics, releases the key, so
//     that the client may retry it.
//
// Keys belong to a client identity (Options.Scope): without one they are
// global, and one caller who learns another's key gets that caller's
// response. The store failing refuses requests with 503 rather than risk a
// second run (Options.FailOpen serves them without a key instead).
//
// What the middleware cannot promise is in docs/idempotency.md: a process
// that crashes mid-handler holds its key only until Options.LockTTL, and
// after that a retry runs the handler again.
package idempotency
