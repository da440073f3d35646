package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/allot-dev/allot/client/idempotency"
)

// A payment endpoint that a client may retry: the second POST with the
// same key gets the first's response, and the payment is made once.
func ExampleNew() {
	payments := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payments++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d made\n", payments)
	})
	mw, err := idempotency.New(idempotency.Options{
		Store: idempotency.NewMemoryStore(), // one process; Redis or RedisURL for a fleet
		Scope: func(r *http.Request) string { return r.Header.Get("X-User") },
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Wrap(pay))
	defer srv.Close()

	for _, body := range []string{"100 EUR", "100 EUR", "999 EUR"} {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", `"3f2c1b9e-pay-1"`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("%d replayed=%q %s", res.StatusCode, res.Header.Get(idempotency.HeaderReplayed), firstLine(b))
	}
	// Output:
	// 201 replayed="" payment 1 made
	// 201 replayed="true" payment 1 made
	// 422 replayed="" {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"This Idempotency-Key was used for a different request (method, path, body or headers); use a new key for a new request."}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s + "\n"
}
