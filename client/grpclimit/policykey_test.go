package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/grpclimit"
)

// "Per user AND per tenant": each policy counts under its own key (here
// from metadata), and the refusal names the refusing policy's key.
func TestEachPolicyItsOwnKey(t *testing.T) {
	// A node with its own rules and no allocator decides on the whole of
	// each limit: exact counts.
	c, err := client.New(client.Config{Logger: quiet(), Rules: []client.Rule{
		{Name: "per-user", Algorithm: "token_bucket", Limit: 2, Period: time.Hour},
		{Name: "per-tenant", Algorithm: "token_bucket", Limit: 3, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	from := func(name string) func(context.Context, string) (string, bool) {
		return func(ctx context.Context, _ string) (string, bool) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get(name); len(v) > 0 && v[0] != "" {
				return v[0], true
			}
			return "", false
		}
	}
	h := serve(t, c, grpclimit.Options{Policies: []grpclimit.Policy{
		{Rule: "per-user", Key: from("x-user")}, {Rule: "per-tenant", Key: from("x-tenant")}}})
	steps := []struct {
		user, tenant string
		ok           bool
		refusedKey   string
	}{
		{"ann", "acme", true, ""},
		{"ann", "acme", true, ""},
		{"ann", "acme", false, "ann"}, // ann's 2 spent
		{"bob", "acme", true, ""},     // acme's third
		{"bob", "acme", false, "acme"},
	}
	for i, s := range steps {
		err := check(t, h, "x-user", s.user, "x-tenant", s.tenant)
		if (err == nil) != s.ok {
			t.Fatalf("call %d (%s of %s): %v, want ok=%v", i+1, s.user, s.tenant, err, s.ok)
		}
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call %d: %v, want ResourceExhausted", i+1, err)
		}
		_, qf, _ := refusal(t, err)
		if v := qf.GetViolations()[0]; v.GetSubject() != v.GetQuotaId()+"/"+redacted(s.refusedKey) {
			t.Fatalf("call %d refused with subject %q, want the refusing policy's key %q", i+1, v.GetSubject(), s.refusedKey)
		}
	}
}

// Two strict policies cannot be checked together (client.ErrTwoStrict):
// New refuses them, naming both, rather than build an interceptor whose
// every call is an error that the default OnError serves unlimited.
func TestTwoStrictPoliciesRefused(t *testing.T) {
	c, err := client.New(client.Config{Logger: quiet(), Rules: []client.Rule{
		{Name: "a", Algorithm: "sliding_log", Limit: 2, Period: time.Hour},
		{Name: "b", Algorithm: "sliding_log", Limit: 3, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = grpclimit.New(c, grpclimit.Options{Policies: []grpclimit.Policy{{Rule: "a"}, {Rule: "b"}}})
	if !errors.Is(err, client.ErrTwoStrict) || !strings.Contains(err.Error(), `"b" is strict, as is Policies[0]'s "a"`) {
		t.Fatalf("New with two strict policies: %v, want ErrTwoStrict naming both", err)
	}
}
