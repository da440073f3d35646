package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// HeaderReplayed marks a replayed response, as Stripe's API does.
const HeaderReplayed = "Idempotent-Replayed"

// Middleware runs each keyed request's handler at most once per key. It
// is safe for concurrent use.
type Middleware struct {
	opts    Options
	store   Store
	owned   io.Closer // the client dialed from RedisURL
	methods map[string]bool
	logs    rate.Sometimes // a store down fails every request: log a few
}

// New checks opts and builds the middleware; with Options.RedisURL it
// dials that Redis (without waiting for it to answer: a Redis down at
// start is a store failure of each request, as later).
func New(opts Options) (*Middleware, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Middleware{opts: o, store: o.Store, methods: map[string]bool{},
		logs: rate.Sometimes{First: 3, Interval: 20 * time.Second}}
	for _, meth := range o.Methods {
		m.methods[meth] = true
	}
	switch {
	case o.Redis != nil:
		m.store = NewRedisStore(o.Redis)
	case o.RedisURL != "":
		ro, err := redis.ParseURL(o.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("idempotency: Options.RedisURL: %w", err)
		}
		c := redis.NewClient(ro)
		m.store, m.owned = NewRedisStore(c), c
	}
	return m, nil
}

// Close closes the Redis client dialed from Options.RedisURL; with any
// other store it does nothing.
func (m *Middleware) Close() error {
	if m.owned == nil {
		return nil
	}
	return m.owned.Close()
}

// Wrap returns next behind the middleware. Its method value is a
// func(http.Handler) http.Handler, the shape routers take.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		key, ok, err := parseKey(r.Header, m.opts.Header, m.opts.MaxKeyLength)
		switch {
		case err != nil:
			writeProblem(w, badKey(err))
			return
		case !ok && m.opts.Require:
			writeProblem(w, missingKey(m.opts.Header))
			return
		case !ok:
			next.ServeHTTP(w, r)
			return
		}
		fp, err := fingerprint(r, m.opts.FingerprintHeaders, m.opts.MaxRequestBytes)
		switch {
		case errors.Is(err, errBodyTooLarge):
			writeProblem(w, requestTooLarge(m.opts.Header, m.opts.MaxRequestBytes))
			return
		case err != nil:
			writeProblem(w, unreadable(err))
			return
		}
		scope := ""
		if m.opts.Scope != nil {
			scope = m.opts.Scope(r)
		}
		m.serve(w, r, next, storeKey(m.opts.KeyPrefix, scope, key), fp)
	})
}

// serve claims key for r and runs next, or answers from what holds it.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, key, fp string) {
	token := newToken()
	c, err := m.claim(r.Context(), key, token, fp)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller has gone; nobody to answer
		}
		m.logs.Do(func() {
			m.opts.Logger.Error("idempotency: store failed", "fail_open", m.opts.FailOpen, "err", err)
		})
		if m.opts.FailOpen {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeProblem(w, storeDown(m.opts.Header))
		return
	}
	switch {
	case c.State == Claimed:
		m.run(w, r, next, key, token, fp)
	case c.Fingerprint != fp:
		writeProblem(w, keyReused(m.opts.Header))
	case c.State == InProgress:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, inProgress(m.opts.Header))
	case c.Record.Truncated:
		writeProblem(w, notKept(m.opts.Header, m.opts.MaxResponseBytes))
	default:
		replay(w, c.Record)
	}
}

// claim asks the store for key and, with Options.Wait, asks again while
// the same request runs elsewhere, until it ends or the wait is over.
func (m *Middleware) claim(ctx context.Context, key, token, fp string) (Claim, error) {
	var deadline <-chan time.Time
	for {
		sctx, cancel := context.WithTimeout(ctx, m.opts.StoreTimeout)
		c, err := m.store.Claim(sctx, key, token, fp, m.opts.LockTTL)
		cancel()
		if err != nil || c.State != InProgress || c.Fingerprint != fp || m.opts.Wait <= 0 {
			return c, err
		}
		if deadline == nil {
			t := time.NewTimer(m.opts.Wait)
			defer t.Stop()
			deadline = t.C
		}
		poll := time.NewTimer(m.opts.PollInterval)
		select {
		case <-poll.C:
		case <-deadline:
			poll.Stop()
			return c, nil
		case <-ctx.Done():
			poll.Stop()
			return c, ctx.Err()
		}
	}
}

// run serves r under token's claim on key, renewing the claim while the
// handler runs, and then stores the response or, for a retryable one or a
// panic, releases the key.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, key, token, fp string) {
	// Store calls after the handler must happen even when the caller has
	// gone: the work is done, and a retry must find it.
	ctx := context.WithoutCancel(r.Context())
	stop := m.renew(ctx, key, token)
	finished := false
	defer func() {
		if !finished { // the handler panicked: the panic goes on after this
			stop()
			m.release(ctx, key, token)
		}
	}()
	rec := newRecorder(w, m.opts.MaxResponseBytes)
	next.ServeHTTP(rec, r)
	finished = true
	stop()
	res := rec.record(fp)
	if m.opts.Retryable(res.Status) {
		m.release(ctx, key, token)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, m.opts.StoreTimeout)
	defer cancel()
	if err := m.store.Complete(sctx, key, token, res, m.opts.TTL); err != nil {
		// The client has its answer; a retry finds the claim until it
		// expires (LockTTL) and may run the handler again after that.
		m.opts.Logger.Error("idempotency: response not stored; a retry after the lock TTL runs the handler again",
			"lock_ttl", m.opts.LockTTL, "err", err)
	}
}

// renew extends token's claim every LockTTL/3 until the returned stop is
// called (more than once is fine).
func (m *Middleware) renew(ctx context.Context, key, token string) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(m.opts.LockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			sctx, cancel := context.WithTimeout(ctx, m.opts.StoreTimeout)
			err := m.store.Extend(sctx, key, token, m.opts.LockTTL)
			cancel()
			if errors.Is(err, ErrClaimLost) {
				m.opts.Logger.Error("idempotency: a running request lost its claim; a duplicate may run", "err", err)
				return
			}
			if err != nil {
				m.logs.Do(func() { m.opts.Logger.Warn("idempotency: claim not renewed", "err", err) })
			}
		}
	}()
	stopped := false
	return func() {
		if !stopped {
			stopped = true
			close(done)
			<-exited
		}
	}
}

func (m *Middleware) release(ctx context.Context, key, token string) {
	sctx, cancel := context.WithTimeout(ctx, m.opts.StoreTimeout)
	defer cancel()
	if err := m.store.Release(sctx, key, token); err != nil {
		m.logs.Do(func() {
			m.opts.Logger.Warn("idempotency: key not released; a retry waits for the lock TTL", "lock_ttl", m.opts.LockTTL, "err", err)
		})
	}
}

// replay writes a stored response. The header values are shared with the
// record, clipped so that an Add by the caller's writer copies them
// rather than writing into the record.
func replay(w http.ResponseWriter, rec *Record) {
	h := w.Header()
	for k, vs := range rec.Header {
		h[k] = slices.Clip(vs)
	}
	h[HeaderReplayed] = replayedTrue
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

var replayedTrue = []string{"true"}
