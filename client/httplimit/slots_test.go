package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/allot-dev/allot/client/httplimit"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// A policy on a concurrency rule holds a slot for the handler's life: a
// request beside a running one is refused 429 with a Retry-After and a
// problem naming the rule; once the first returns, the next passes.
func TestConcurrencyPolicy(t *testing.T) {
	set, err := rules.Parse("test", []byte(`
rules:
  - name: one-at-a-time
    algorithm: concurrency
    limit: 1
  - name: tb
    algorithm: token_bucket
    limit: 1000
    period: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	_, c := serveAllocator(t, allocator.Config{Rules: set})
	mw, err := httplimit.New(c, httplimit.Options{Logger: quiet(),
		Policies: []httplimit.Policy{{Rule: "one-at-a-time"}, {Rule: "tb"}}})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-leave
		}
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	deadline := time.Now().Add(5 * time.Second)
	for get(t, srv).status != http.StatusOK { // the key's first lease
		if time.Now().After(deadline) {
			t.Fatal("no slot within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "/slow")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	r := get(t, srv)
	var p struct {
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || p.Status != 429 ||
		len(p.Violated) != 1 || p.Violated[0] != "one-at-a-time" {
		t.Fatalf("beside a running request: %d %v %s", r.status, r.header, r.body)
	}
	close(leave)
	if s := <-done; s != http.StatusOK {
		t.Fatalf("the slow request: %d", s)
	}
	if r := get(t, srv); r.status != http.StatusOK {
		t.Fatalf("after the slow request returned: %d %s", r.status, r.body)
	}
}
