package idempotency

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing but its header
// map, cleared for each request, so that the benchmark counts the
// middleware's allocations and not a recorder's.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkReplay is the replay path: a retry of a stored request, parsed,
// fingerprinted (its body read and hashed), claimed in the memory store
// and answered from the record.
func BenchmarkReplay(b *testing.B) {
	h := newMW(b, NewMemoryStore(), Options{}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ord_123","amount":1000,"currency":"eur"}`)
	}))
	const body = `{"amount":1000,"currency":"eur","customer":"cus_42"}`
	body0 := strings.NewReader(body)
	r := request("POST", "8e03978e-40d5-43e8-bc93-6894a57f9324", "")
	r.Body = io.NopCloser(body0)
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, r) // the first: stores the response
	b.ReportAllocs()
	for b.Loop() {
		body0.Reset(body)
		r.Body = io.NopCloser(body0)
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.status != http.StatusCreated || w.h.Get(HeaderReplayed) != "true" {
		b.Fatalf("status %d, replayed %q: not the replay", w.status, w.h.Get(HeaderReplayed))
	}
}
