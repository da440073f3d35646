package httplimit_test

import (
	"net/http"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
)

// The README's snippet of per-policy keys, as compiled code
// (internal/readme checks that it is here).
func readmePolicyKeys(c *client.Client, userOf, tenantOf func(*http.Request) (string, bool)) (*httplimit.Middleware, error) {
	mw, err := httplimit.New(c, httplimit.Options{Policies: []httplimit.Policy{
		{Rule: "per-user", Key: func(r *http.Request) (string, bool) { return userOf(r) }},
		{Rule: "per-tenant", Key: func(r *http.Request) (string, bool) { return tenantOf(r) }},
	}})
	return mw, err
}

var _ = readmePolicyKeys
