package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
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
	h, err := newHandler(c, o.rule, log)
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
