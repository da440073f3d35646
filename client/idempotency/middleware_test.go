package idempotency

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// forEachStore runs a middleware test on each store, on the machine's
// clock: the middleware's lock renewal runs on it.
func forEachStore(t *testing.T, test func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { test(t, NewMemoryStore()) })
	t.Run("redis", func(t *testing.T) { test(t, NewRedisStore(sharedRedis(t))) })
}

func TestRetryGetsTheReplay(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		svc := &service{}
		h := newMW(t, s, Options{}).Wrap(svc)
		key := newToken()
		first := serve(h, request("POST", key, "an order"))
		wantStatus(t, first, 201, "first")
		if first.Header().Get(HeaderReplayed) != "" {
			t.Errorf("the first response says %s", HeaderReplayed)
		}
		for i := range 3 {
			again := serve(h, request("POST", key, "an order"))
			wantStatus(t, again, 201, "retry")
			if again.Body.String() != "made an order" || again.Header().Get("X-Run") != "i" ||
				again.Header().Get("Content-Type") != "text/plain" {
				t.Errorf("retry %d: %q with %v, want the first's response", i, again.Body, again.Header())
			}
			if again.Header().Get(HeaderReplayed) != "true" {
				t.Errorf("retry %d: %s is %q, want true", i, HeaderReplayed, again.Header().Get(HeaderReplayed))
			}
		}
		wantRuns(t, svc, 1)
	})
}

func TestSameKeyDifferentRequestIs422(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		svc := &service{}
		h := newMW(t, s, Options{FingerprintHeaders: []string{"content-type"}}).Wrap(svc)
		key := newToken()
		wantStatus(t, serve(h, request("POST", key, "an order")), 201, "first")
		other := map[string]func() *http.Request{
			"another body":   func() *http.Request { return request("POST", key, "two orders") },
			"another method": func() *http.Request { return request("PATCH", key, "an order") },
			"another path": func() *http.Request {
				r := request("POST", key, "an order")
				r.URL.Path = "/refunds"
				return r
			},
			"another query": func() *http.Request {
				r := request("POST", key, "an order")
				r.URL.RawQuery = "dry=1"
				return r
			},
			"another fingerprint header": func() *http.Request {
				r := request("POST", key, "an order")
				r.Header.Set("Content-Type", "application/json")
				return r
			},
		}
		for name, req := range other {
			w := serve(h, req())
			wantStatus(t, w, 422, name)
			if !strings.Contains(w.Body.String(), "Idempotency-Key was used for a different request") {
				t.Errorf("%s: body %s does not say why", name, w.Body)
			}
		}
		wantRuns(t, svc, 1)
	})
}

func TestDuplicateWhileRunningIs409(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		svc := &service{started: make(chan struct{}, 1), gate: make(chan struct{})}
		h := newMW(t, s, Options{}).Wrap(svc)
		key := newToken()
		done := make(chan int)
		go func() { done <- serve(h, request("POST", key, "slow")).Code }()
		<-svc.started
		dup := serve(h, request("POST", key, "slow"))
		wantStatus(t, dup, 409, "duplicate")
		if dup.Header().Get("Retry-After") != "1" || !strings.Contains(dup.Body.String(), "still being processed") {
			t.Errorf("409 with Retry-After %q and %s", dup.Header().Get("Retry-After"), dup.Body)
		}
		wantStatus(t, serve(h, request("POST", key, "not the same")), 422, "another request while running")
		close(svc.gate)
		if code := <-done; code != 201 {
			t.Fatalf("first: %d", code)
		}
		wantStatus(t, serve(h, request("POST", key, "slow")), 201, "after")
		wantRuns(t, svc, 1)
	})
}

func TestDuplicateWaits(t *testing.T) {
	svc := &service{started: make(chan struct{}, 1), gate: make(chan struct{})}
	h := newMW(t, NewMemoryStore(), Options{Wait: time.Minute, PollInterval: time.Millisecond}).Wrap(svc)
	key := newToken()
	go serve(h, request("POST", key, "x"))
	<-svc.started
	dup := make(chan *http.Response)
	go func() { dup <- serve(h, request("POST", key, "x")).Result() }()
	close(svc.gate)
	r := <-dup
	if r.StatusCode != 201 || r.Header.Get(HeaderReplayed) != "true" {
		t.Fatalf("a waiting duplicate got %d, replayed %q; want the replay", r.StatusCode, r.Header.Get(HeaderReplayed))
	}
	wantRuns(t, svc, 1)
}

func TestDuplicateWaitsThen409(t *testing.T) {
	svc := &service{started: make(chan struct{}, 1), gate: make(chan struct{})}
	defer close(svc.gate)
	h := newMW(t, NewMemoryStore(), Options{Wait: 20 * time.Millisecond, PollInterval: time.Millisecond}).Wrap(svc)
	key := newToken()
	go serve(h, request("POST", key, "x"))
	<-svc.started
	wantStatus(t, serve(h, request("POST", key, "x")), 409, "a duplicate past its wait")
}

func TestFailureReleasesTheKey(t *testing.T) {
	for _, c := range []struct {
		status int
		runs   int32 // after a request and its retry
	}{{500, 2}, {503, 2}, {429, 2}, {400, 1}, {404, 1}, {200, 1}} {
		svc := &service{status: c.status}
		h := newMW(t, NewMemoryStore(), Options{}).Wrap(svc)
		key := newToken()
		wantStatus(t, serve(h, request("POST", key, "x")), c.status, "first")
		wantStatus(t, serve(h, request("POST", key, "x")), c.status, "retry")
		if got := svc.runs.Load(); got != c.runs {
			t.Errorf("status %d: the handler ran %d times for a request and its retry, want %d", c.status, got, c.runs)
		}
	}
}

func TestPanicReleasesTheKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		runs := 0
		h := newMW(t, s, Options{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				panic("handler bug")
			}
			w.WriteHeader(201)
		}))
		key := newToken()
		func() {
			defer func() {
				if p := recover(); p != "handler bug" {
					t.Errorf("recovered %v, want the handler's panic to go on", p)
				}
			}()
			serve(h, request("POST", key, "x"))
		}()
		wantStatus(t, serve(h, request("POST", key, "x")), 201, "the retry after a panic")
		if runs != 2 {
			t.Errorf("runs %d, want 2", runs)
		}
	})
}

func TestResponseTooLargeIsNotReplayed(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		svc := &service{}
		h := newMW(t, s, Options{MaxResponseBytes: 10}).Wrap(svc)
		key := newToken()
		first := serve(h, request("POST", key, "a big order"))
		wantStatus(t, first, 201, "first")
		if first.Body.String() != "made a big order" {
			t.Errorf("the client got %q, want all of it", first.Body)
		}
		again := serve(h, request("POST", key, "a big order"))
		wantStatus(t, again, 409, "retry of a response too large to keep")
		if !strings.Contains(again.Body.String(), "larger than the 10 bytes kept") || again.Header().Get("Retry-After") != "" {
			t.Errorf("409 with Retry-After %q and %s", again.Header().Get("Retry-After"), again.Body)
		}
		wantRuns(t, svc, 1)
	})
}

func TestWithoutAKey(t *testing.T) {
	svc := &service{}
	h := newMW(t, NewMemoryStore(), Options{}).Wrap(svc)
	serve(h, request("POST", "", "x"))
	serve(h, request("POST", "", "x"))
	wantRuns(t, svc, 2)

	req := newMW(t, NewMemoryStore(), Options{Require: true}).Wrap(svc)
	w := serve(req, request("POST", "", "x"))
	wantStatus(t, w, 400, "no key, required")
	if !strings.Contains(w.Body.String(), "needs an Idempotency-Key header") {
		t.Errorf("body %s", w.Body)
	}
	wantStatus(t, serve(req, request("GET", "", "")), 201, "GET without a key, required")
	wantRuns(t, svc, 3)
}

func TestOnlyUnsafeMethods(t *testing.T) {
	svc := &service{}
	h := newMW(t, NewMemoryStore(), Options{}).Wrap(svc)
	for _, m := range []string{"GET", "PUT", "DELETE", "GET"} {
		serve(h, request(m, "k1", ""))
	}
	wantRuns(t, svc, 4)
	h = newMW(t, NewMemoryStore(), Options{Methods: []string{"PUT"}}).Wrap(svc)
	serve(h, request("PUT", "k1", ""))
	serve(h, request("PUT", "k1", ""))
	serve(h, request("POST", "k1", ""))
	wantRuns(t, svc, 6)
}

func TestScopeSeparatesCallers(t *testing.T) {
	svc := &service{}
	h := newMW(t, NewMemoryStore(), Options{Scope: func(r *http.Request) string { return r.Header.Get("X-User") }}).Wrap(svc)
	as := func(user string) *http.Request {
		r := request("POST", "same-key", "x")
		r.Header.Set("X-User", user)
		return r
	}
	serve(h, as("alice"))
	serve(h, as("bob"))
	wantRuns(t, svc, 2)
	if w := serve(h, as("alice")); w.Header().Get(HeaderReplayed) != "true" || w.Header().Get("X-Run") != "i" {
		t.Errorf("alice's retry: replayed %q, run %q; want her own response", w.Header().Get(HeaderReplayed), w.Header().Get("X-Run"))
	}
	wantRuns(t, svc, 2)
}

func TestRequestBodyBounded(t *testing.T) {
	svc := &service{}
	h := newMW(t, NewMemoryStore(), Options{MaxRequestBytes: 8}).Wrap(svc)
	wantStatus(t, serve(h, request("POST", "k", "12345678")), 201, "8 bytes")
	r := request("POST", "k2", "123456789")
	w := serve(h, r)
	wantStatus(t, w, 413, "9 bytes")
	if !strings.Contains(w.Body.String(), "at most 8 bytes") {
		t.Errorf("body %s", w.Body)
	}
	r = request("POST", "k3", "123456789")
	r.ContentLength = -1 // chunked: no length to refuse by up front
	wantStatus(t, serve(h, r), 413, "9 bytes, chunked")
	wantRuns(t, svc, 1)
}

func TestClaimKeptWhileHandlerRuns(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		svc := &service{started: make(chan struct{}, 1), gate: make(chan struct{})}
		h := newMW(t, s, Options{LockTTL: 100 * time.Millisecond}).Wrap(svc)
		key := newToken()
		done := make(chan struct{})
		go func() { serve(h, request("POST", key, "x")); close(done) }()
		<-svc.started
		// Four lock TTLs: only renewal keeps the claim.
		for deadline := time.Now().Add(400 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			wantStatus(t, serve(h, request("POST", key, "x")), 409, "a duplicate while the handler runs past its lock TTL")
		}
		close(svc.gate)
		<-done
		wantRuns(t, svc, 1)
	})
}
