package idempotency

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain quiets go-redis's own log, which prints a line for each failed
// dial of the Redis that TestFleetRedisKilledMidRun kills.
func TestMain(m *testing.M) {
	redis.SetLogger(silentRedis{})
	m.Run()
}

type silentRedis struct{}

func (silentRedis) Printf(context.Context, string, ...any) {}

// service is a handler that counts its runs: what the middleware must
// never let happen twice for one key.
type service struct {
	runs    atomic.Int32
	started chan struct{} // each run sends on it, when given and ready
	gate    chan struct{} // the first run waits for it, when given
	status  int           // default 201
	work    time.Duration // how long each run takes
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.runs.Add(1)
	if s.started != nil {
		select {
		case s.started <- struct{}{}:
		default: // a run the test did not expect: it fails on the count, not here
		}
	}
	if s.gate != nil && n == 1 {
		<-s.gate
	}
	time.Sleep(s.work) // the handler's work, not a wait for the test
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Run", strings.Repeat("i", int(n)))
	status := s.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	io.WriteString(w, "made "+string(body))
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newMW is a middleware on store with opts, the test failing on an error.
func newMW(t testing.TB, store Store, opts Options) *Middleware {
	t.Helper()
	opts.Store = store
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// request is a POST of body to /orders, with key as its Idempotency-Key
// unless key is "".
func request(method, key, body string) *http.Request {
	r := httptest.NewRequest(method, "/orders", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int, what string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("%s: status %d (%s), want %d", what, w.Code, w.Body.String(), status)
	}
}

func wantRuns(t *testing.T, s *service, n int32) {
	t.Helper()
	if got := s.runs.Load(); got != n {
		t.Fatalf("the handler ran %d times, want %d", got, n)
	}
}

// waitFor polls cond for up to 5 s: a goroutine of the test's getting
// somewhere, not a measure of time.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
