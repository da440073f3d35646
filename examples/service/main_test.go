package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startAllocator runs a real allocator on 127.0.0.1 with the memory store
// and the built-in example rules, as `go run ./cmd/allocator` does.
func startAllocator(t *testing.T) string {
	t.Helper()
	a, err := allocator.New(allocator.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	return a.Addr()
}

// hello serves newHandler with the options args set, against a fresh
// allocator with the built-in rules, and returns a function that sends
// GET path with an API key ("" for none).
func hello(t *testing.T, args ...string) func(path, key string) *http.Response {
	t.Helper()
	o, err := parse(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// A strict rule whose check times out falls back to the node's share;
	// on a loaded machine that would blur the exact counts the tests read.
	c, err := client.New(client.Config{Allocators: []string{startAllocator(t)}, Logger: quiet(), CheckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h, err := newHandler(c, o, quiet())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return func(path, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
}

func TestHelloIsLimited(t *testing.T) {
	get := hello(t)
	// api-per-key: 1,000 a minute in bursts of 200. Some of the burst must
	// pass, and far fewer than 400 requests must reach a refusal.
	passed := 0
	for range 400 {
		resp := get("/hello", "demo")
		if got := resp.Header.Get("RateLimit-Policy"); got != `"api-per-key";q=1000;w=60` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if resp.StatusCode == http.StatusOK {
			passed++
			continue
		}
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("RateLimit") != `"api-per-key";r=0;t=`+resp.Header.Get("Retry-After") {
			t.Fatalf("refusal: %d %v", resp.StatusCode, resp.Header)
		}
		if passed == 0 {
			t.Fatal("the first request was refused")
		}
		if resp := get("/hello", "someone-else"); resp.StatusCode != http.StatusOK {
			t.Fatalf("another key: %d", resp.StatusCode)
		}
		if resp := get("/healthz", "demo"); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("/healthz was limited: %d %v", resp.StatusCode, resp.Header)
		}
		return
	}
	t.Fatalf("400 requests passed a burst of 200")
}

// The quota and window of RateLimit-Policy are the rule's, whichever rule
// --rule names. login-attempts (5 per 15 minutes) is strict: the
// allocator decides every request, so every figure is exact.
func TestPolicyIsTheRules(t *testing.T) {
	get := hello(t, "--rule", "login-attempts")
	const policy = `"login-attempts";q=5;w=900`
	for i := range 5 {
		resp := get("/hello", "demo")
		want := `"login-attempts";r=` + strconv.Itoa(4-i) + ";t=900"
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") != policy || resp.Header.Get("RateLimit") != want {
			t.Fatalf("request %d: %d, RateLimit-Policy %q, RateLimit %q; want 200, %q, %q", i+1, resp.StatusCode,
				resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), policy, want)
		}
	}
	resp := get("/hello", "demo")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit-Policy") != policy ||
		resp.Header.Get("RateLimit") != `"login-attempts";r=0;t=900` || resp.Header.Get("Retry-After") != "900" {
		t.Fatalf("6th request: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestParse(t *testing.T) {
	vars := map[string]string{"ALLOT_ALLOCATORS": "a:7070, b:7070,", "SERVICE_LISTEN": "0.0.0.0:8080"}
	getenv := func(k string) string { return vars[k] }
	o, err := parse([]string{"--key-header", "X-Key"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := &options{listen: "0.0.0.0:8080", allocators: []string{"a:7070", "b:7070"}, rule: "api-per-key",
		keyHeader: "X-Key"}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("parse = %+v, want %+v", o, want)
	}
	if o, _ := parse([]string{"--allocators", "c:1"}, getenv, io.Discard); o == nil || len(o.allocators) != 1 || o.allocators[0] != "c:1" {
		t.Fatalf("a flag did not win over its variable: %+v", o)
	}
	// --window is gone: RateLimit-Policy's w is the rule's period.
	for _, bad := range [][]string{{"--allocators", " , "}, {"extra"}, {"--window", "1m"}} {
		if _, err := parse(bad, getenv, io.Discard); err == nil {
			t.Errorf("parse(%q) succeeded", bad)
		}
	}
	vars["SERVICE_TRUST_PROXY"] = "maybe"
	if _, err := parse(nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "SERVICE_TRUST_PROXY") {
		t.Errorf("a bad variable: %v", err)
	}
}

// run serves until its context ends, then shuts down cleanly.
func TestRunServesAndStops(t *testing.T) {
	addr := startAllocator(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--allocators", addr}, func(string) string { return "" }, w)
		w.Close()
	}()
	listening := make(chan string, 1)
	go func() { // read the log: the "serving" line has the address
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "msg=serving addr="); ok {
				listening <- strings.Fields(rest)[0]
			}
		}
	}()
	var base string
	select {
	case base = <-listening:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	}
	resp, err := http.Get("http://" + base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

// With no allocator answering, the service has no rules and does not
// start: it says why at once, instead of serving every request unlimited.
func TestRunWithoutRulesFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--allocators", dead}, func(string) string { return "" }, io.Discard)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrNoRules) {
			t.Fatalf("run: %v, want client.ErrNoRules", err)
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("run served with no allocator and no rules")
	}
}
