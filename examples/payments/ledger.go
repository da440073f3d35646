package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/allot-dev/allot/client/idempotency"
)

// ledger is the payments made, in memory: what a retry must not add to.
type ledger struct {
	mu       sync.Mutex
	payments map[string]payment
	took     time.Duration // how long a payment takes
}

type payment struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func newLedger(took time.Duration) *ledger {
	return &ledger{payments: map[string]payment{}, took: took}
}

// newHandler routes POST /payments behind mw; GET needs no key.
func newHandler(mw *idempotency.Middleware, l *ledger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(l.pay)))
	mux.HandleFunc("GET /payments/{id}", l.get)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// pay makes a payment of the request's amount. A bad request is answered
// 400, and that answer too is what a retry with the same key gets.
func (l *ledger) pay(w http.ResponseWriter, r *http.Request) {
	var p payment
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Amount <= 0 || len(p.Currency) != 3 {
		http.Error(w, `want {"amount": a positive integer, "currency": a three-letter code}`, http.StatusBadRequest)
		return
	}
	select { // the bank takes its time
	case <-time.After(l.took):
	case <-r.Context().Done():
	}
	l.mu.Lock()
	p.ID = fmt.Sprintf("pay_%d", len(l.payments)+1)
	l.payments[p.ID] = p
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+p.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}

func (l *ledger) get(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	p, ok := l.payments[r.PathValue("id")]
	l.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p)
}

// count is the number of payments made.
func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.payments)
}
