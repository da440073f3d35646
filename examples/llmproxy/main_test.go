package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/allot-dev/allot/client"
)

// A key whose completions used more than its burst is in debt: refused,
// with a Retry-After, although each was admitted on an estimate of one.
func TestCompletionsAreSettled(t *testing.T) {
	o, err := parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	c, err := newClient(o, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h, err := newHandler(c, o, log)
	if err != nil {
		t.Fatal(err)
	}
	post := func(key string, maxTokens string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hello there","max_tokens":`+maxTokens+`}`))
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	// A burst of 2,000 and a debt of 2,000: a completion of 3,002 tokens
	// leaves the key about 1,000 in debt, six seconds of its rate.
	if rec := post("demo", "3000"); rec.Code != http.StatusOK || rec.Header().Get("X-Tokens-Used") != "3002" {
		t.Fatalf("a long completion: %d %v", rec.Code, rec.Header())
	}
	rec := post("demo", "1")
	if retry, _ := strconv.Atoi(rec.Header().Get("Retry-After")); rec.Code != http.StatusTooManyRequests || retry < 5 || retry > 7 {
		t.Fatalf("a key in debt: %d %v, want 429 with a Retry-After of about 6 s", rec.Code, rec.Header())
	}
	if rec := post("other", "10"); rec.Code != http.StatusOK {
		t.Fatalf("another key: %d", rec.Code)
	}
}

// A key with four completions in flight is refused a fifth, with a
// Retry-After, and served again once one ends. The slots are the ones
// the middleware takes, under its key for the API key ("key:demo").
func TestCompletionsInFlight(t *testing.T) {
	o, err := parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	c, err := newClient(o, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h, err := newHandler(c, o, log)
	if err != nil {
		t.Fatal(err)
	}
	var running []*client.Slot
	for range 4 { // four completions of demo, running
		s, err := c.TakeSlot(context.Background(), o.inflight, "key:demo")
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, s)
	}
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":5}`))
		req.Header.Set("X-API-Key", "demo")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := post(); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" ||
		!strings.Contains(rec.Body.String(), "llm-inflight") {
		t.Fatalf("a fifth completion in flight: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	running[0].Release()
	if rec := post(); rec.Code != http.StatusOK {
		t.Fatalf("once one ended: %d %s", rec.Code, rec.Body)
	}
}
