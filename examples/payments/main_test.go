package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/redistest"
)

// instance serves the service with args against its own ledger.
func instance(t *testing.T, args ...string) (*ledger, string) {
	t.Helper()
	o, err := parse(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := newMiddleware(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	l := newLedger(o.paymentTime)
	srv := httptest.NewServer(newHandler(mw, l))
	t.Cleanup(srv.Close)
	return l, srv.URL
}

type reply struct {
	status   int
	replayed string
	body     string
}

func pay(t *testing.T, url, key, body string) reply {
	req, _ := http.NewRequest("POST", url+"/payments", strings.NewReader(body))
	req.Header.Set("X-API-Key", "demo")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header.Get("Idempotent-Replayed"), string(b)}
}

const order = `{"amount":1000,"currency":"EUR"}`

func TestRetryPaysOnce(t *testing.T) {
	l, url := instance(t, "--payment-time", "0s")
	first := pay(t, url, `"order-1"`, order)
	again := pay(t, url, `"order-1"`, order)
	if first.status != 201 || again.status != 201 || again.replayed != "true" || again.body != first.body {
		t.Errorf("first %+v, retry %+v; want 201 and its replay", first, again)
	}
	if r := pay(t, url, `"order-1"`, `{"amount":9999,"currency":"EUR"}`); r.status != 422 {
		t.Errorf("the key with another amount: %+v, want 422", r)
	}
	if r := pay(t, url, `"order-2"`, `{"amount":-1}`); r.status != 400 {
		t.Errorf("a bad payment: %+v, want 400", r)
	}
	if r := pay(t, url, `"order-2"`, `{"amount":-1}`); r.status != 400 || r.replayed != "true" {
		t.Errorf("its retry: %+v, want the 400 replayed", r)
	}
	if l.count() != 1 {
		t.Errorf("%d payments made, want 1", l.count())
	}
}

func TestRequireKey(t *testing.T) {
	_, url := instance(t, "--require-key", "--payment-time", "0s")
	if r := pay(t, url, "", order); r.status != 400 || !strings.Contains(r.body, "Idempotency-Key") {
		t.Errorf("no key: %+v, want 400 naming the header", r)
	}
}

// Two instances on one Redis, sent the same payment at once: one pays,
// the other answers 409 (or, if it came late, the replay); a retry on
// either gets the replay; one payment in all.
func TestTwoInstancesShareKeys(t *testing.T) {
	url := redistest.URL(t)
	key := `"order-` + time.Now().Format(time.RFC3339Nano) + `"` // unique on a shared Redis
	a, urlA := instance(t, "--redis", url, "--payment-time", "300ms")
	b, urlB := instance(t, "--redis", url, "--payment-time", "300ms")
	var got [2]reply
	var wg sync.WaitGroup
	for i, u := range []string{urlA, urlB} {
		wg.Go(func() { got[i] = pay(t, u, key, order) })
	}
	wg.Wait()
	paid, dup := got[0], got[1]
	if dup.status == 201 && dup.replayed == "" {
		paid, dup = dup, paid
	}
	if paid.status != 201 || paid.replayed != "" || !(dup.status == 409 || dup.replayed == "true") {
		t.Errorf("the same payment on two instances at once: %+v and %+v; want one 201 and a 409 or replay", paid, dup)
	}
	for _, u := range []string{urlA, urlB} {
		if r := pay(t, u, key, order); r.status != 201 || r.replayed != "true" || r.body != paid.body {
			t.Errorf("a retry: %+v, want the replay of %+v", r, paid)
		}
	}
	if n := a.count() + b.count(); n != 1 {
		t.Errorf("%d payments made on two instances, want 1", n)
	}
}

func TestParse(t *testing.T) {
	o, err := parse(nil, func(k string) string {
		return map[string]string{"PAYMENTS_REDIS": "redis://r:6379/0", "PAYMENTS_REQUIRE_KEY": "true"}[k]
	}, io.Discard)
	if err != nil || o.redis != "redis://r:6379/0" || !o.requireKey || o.listen != "127.0.0.1:8081" {
		t.Errorf("parse from the environment: %+v, %v", o, err)
	}
	for _, args := range [][]string{{"--scope-header", ""}, {"extra"}, {"--payment-time", "soon"}} {
		if _, err := parse(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parse(%q) took it", args)
		}
	}
	if _, err := newMiddleware(&options{redis: "nope://x", scopeHeader: "X"}, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), "RedisURL") {
		t.Errorf("a bad --redis: %v, want an error naming it", err)
	}
}
