package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
)

// "Per user AND per tenant": each policy counts under its own key. A user
// spends its own 2 and its tenant's 3; another user of the tenant has its
// own 2 but only what the tenant has left. A policy's key is used as it is,
// so that the service's own c.Allow on the same key spends from the same
// bucket; a request without one takes the middleware's key.
func TestEachPolicyItsOwnKey(t *testing.T) {
	c := localClient(t, client.Rule{Name: "per-user", Algorithm: "token_bucket", Limit: 2, Period: time.Hour},
		client.Rule{Name: "per-tenant", Algorithm: "token_bucket", Limit: 3, Period: time.Hour})
	header := func(name string) func(*http.Request) (string, bool) {
		return func(r *http.Request) (string, bool) { v := r.Header.Get(name); return v, v != "" }
	}
	srv := limited(t, c, httplimit.Options{Policies: []httplimit.Policy{
		{Rule: "per-user", Key: header("X-User")}, {Rule: "per-tenant", Key: header("X-Tenant")}}})
	steps := []struct {
		user, tenant string
		want         int
	}{
		{"ann", "acme", http.StatusOK},
		{"ann", "acme", http.StatusOK},
		{"ann", "acme", http.StatusTooManyRequests}, // ann's 2 spent
		{"bob", "acme", http.StatusOK},              // acme's third
		{"bob", "acme", http.StatusTooManyRequests}, // acme's 3 spent
		{"cat", "zeta", http.StatusOK},
	}
	for i, s := range steps {
		if got := get(t, srv, "X-User: "+s.user, "X-Tenant: "+s.tenant).status; got != s.want {
			t.Fatalf("request %d (%s of %s): %d, want %d", i+1, s.user, s.tenant, got, s.want)
		}
	}
	// The service's own check of cat spends from the policy's bucket.
	if !c.Allow(context.Background(), "per-user", "cat") {
		t.Fatal("cat's second token refused to the service's own Allow")
	}
	if got := get(t, srv, "X-User: cat", "X-Tenant: zeta").status; got != http.StatusTooManyRequests {
		t.Fatalf("cat after its own Allow spent its second: %d, want 429", got)
	}
	// Without the header, the policy takes the middleware's key (the IP).
	if got := get(t, srv, "X-Tenant: zeta").status; got != http.StatusOK {
		t.Fatalf("anonymous of zeta: %d, want 200", got)
	}
}

// Two strict policies cannot be checked together (client.ErrTwoStrict):
// New refuses them, naming both, rather than build a middleware whose
// every request is an error that the default OnError serves unlimited.
func TestTwoStrictPoliciesRefused(t *testing.T) {
	c := localClient(t, client.Rule{Name: "a", Algorithm: "sliding_log", Limit: 2, Period: time.Hour},
		client.Rule{Name: "b", Algorithm: "sliding_log", Limit: 3, Period: time.Hour})
	_, err := httplimit.New(c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "a"}, {Rule: "b"}}})
	if !errors.Is(err, client.ErrTwoStrict) || !strings.Contains(err.Error(), `"b" is strict, as is Policies[0]'s "a"`) {
		t.Fatalf("New with two strict policies: %v, want ErrTwoStrict naming both", err)
	}
}
