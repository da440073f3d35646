package idempotency_test

import (
	"net/http"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
	"github.com/allot-dev/allot/client/idempotency"
)

// The README's and docs/idempotency.md's snippets, as compiled code (the
// check in internal/readme finds them here): functions never run, for go
// test to compile and go vet to check.

func readmeIdempotentService() error {
	idem, err := idempotency.New(idempotency.Options{
		RedisURL: "redis://127.0.0.1:6379/0", // shared by every instance of the service
		Scope:    callerOf,                   // keys are per caller: the authenticated one
	})
	if err != nil {
		return err
	}
	defer idem.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /payments", idem.Wrap(http.HandlerFunc(pay)))
	return http.ListenAndServe("127.0.0.1:8080", mux)
}

func docsLimitedAndIdempotent(c *client.Client, idem *idempotency.Middleware) error {
	limit, err := httplimit.New(c, httplimit.Options{
		Policies:  []httplimit.Policy{{Rule: "api-per-key"}},
		KeyHeader: "X-API-Key",
	})
	if err != nil {
		return err
	}
	// The limit outside: a refused request claims no key, and a retry is
	// charged like any request.
	mux := http.NewServeMux()
	mux.Handle("POST /payments", limit.Wrap(idem.Wrap(http.HandlerFunc(pay))))
	return http.ListenAndServe("127.0.0.1:8080", mux)
}

func callerOf(r *http.Request) string {
	user, _, _ := r.BasicAuth()
	return user
}

func pay(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }

var _, _ = readmeIdempotentService, docsLimitedAndIdempotent
