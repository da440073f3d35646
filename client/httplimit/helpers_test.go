package httplimit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// Periods of an hour or a day: no token comes back while a test runs.
const testRules = `
rules:
  - name: hourly
    algorithm: token_bucket
    limit: 3
    period: 1h
  - name: burst
    algorithm: token_bucket
    limit: 2
    period: 1h
  - name: plenty
    algorithm: token_bucket
    limit: 1000000
    period: 24h
  - name: login
    algorithm: sliding_log
    limit: 2
    period: 24h
`

// startAllocator runs a real allocator on 127.0.0.1 with the memory store
// and returns a client connected to it.
func startAllocator(t testing.TB) *client.Client {
	t.Helper()
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	_, c := serveAllocator(t, allocator.Config{Rules: set})
	return c
}

// serveAllocator runs an allocator with cfg and returns it and a client
// connected to it.
func serveAllocator(t testing.TB, cfg allocator.Config) (*allocator.Allocator, *client.Client) {
	t.Helper()
	cfg.Logger = quiet()
	a, err := allocator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	// A strict rule whose check times out falls back to the node's share;
	// on a loaded machine that would blur the exact counts the tests read.
	c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Logger: quiet(), CheckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return a, c
}

// localClient is a node with rs and no allocator: it decides alone, on
// the whole of each limit, so every count is exact.
func localClient(t testing.TB, rs ...client.Rule) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Rules: rs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// limited serves "ok" behind a middleware built from opts.
func limited(t testing.TB, c *client.Client, opts httplimit.Options) *httptest.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	mw, err := httplimit.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status int
	header http.Header
	body   string
}

// get sends GET / with the given header lines ("Name: value").
func get(t testing.TB, srv *httptest.Server, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(name, strings.TrimSpace(value))
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(body)}
}
