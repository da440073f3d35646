package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
)

const adminToken = "admin-token-0123456789abcdef"

// serveTLS runs an allocator over TLS with an admin token, and returns the
// flags that reach it (without the token) and the token's file.
func serveTLS(t *testing.T) (flags []string, tokenFile string) {
	t.Helper()
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	caFile := ca.Write(t, dir, "ca.crt")
	cert, key := ca.Issue(t, certstest.Loopback).Write(t, dir, "allocator")
	tokenFile = filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte("support "+adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(allocator.Config{TLS: allocator.TLSConfig{CertFile: cert, KeyFile: key}, AdminTokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	mine := filepath.Join(dir, "mine.token")
	if err := os.WriteFile(mine, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--addr", a.Addr(), "--tls-ca", caFile, "--timeout", "5s"}, mine
}

func allotctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

// The common calls, end to end against a real allocator: set, get, list
// and delete, with the admin token; without it, refused.
func TestOverrideCommands(t *testing.T) {
	flags, token := serveTLS(t)
	with := append(append([]string{}, flags...), "--token-file", token)

	_, err := allotctl(t, append(flags, "override", "get", "--rule", "api-per-key", "--key", "tenant-42")...)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("get without the token: %v, want Unauthenticated", err)
	}
	out, err := allotctl(t, append(with, "override", "set", "--rule", "api-per-key", "--key", "tenant-42", "--limit", "10000",
		"--ttl", "24h", "--note", "ticket 4711")...)
	if err != nil || !strings.Contains(out, "set api-per-key/tenant-42: limit 10000, burst 2000") || !strings.Contains(out, "set by token:support") {
		t.Fatalf("set: %v\n%s", err, out)
	}
	out, err = allotctl(t, append(with, "override", "get", "--rule", "api-per-key", "--key", "tenant-42")...)
	if err != nil || !strings.Contains(out, `note "ticket 4711"`) || !strings.Contains(out, "effective: limit 10000 per 1m0s, burst 2000, from the api") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	expires := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if out, err := allotctl(t, append(with, "override", "set", "--rule", "api-per-key", "--key", "crawler-1", "--limit", "10", "--expires", expires)...); err != nil {
		t.Fatalf("set --expires: %v\n%s", err, out)
	}
	out, err = allotctl(t, append(with, "override", "list", "--rule", "api-per-key", "--page-size", "1")...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[1], "crawler-1 ") || !strings.HasPrefix(lines[2], "tenant-42 ") {
		t.Fatalf("list, a page of one at a time: %v\n%s", err, out)
	}
	out, err = allotctl(t, append(with, "--json", "override", "delete", "--rule", "api-per-key", "--key", "crawler-1")...)
	// (protojson varies its spacing from run to run on purpose: the
	// output is read as JSON, not as text.)
	var deleted struct {
		Override struct{ Key string } `json:"override"`
	}
	if err != nil || json.Unmarshal([]byte(out), &deleted) != nil || deleted.Override.Key != "crawler-1" {
		t.Fatalf("delete --json: %v\n%s", err, out)
	}
	_, err = allotctl(t, append(with, "override", "delete", "--rule", "api-per-key", "--key", "crawler-1")...)
	if status.Code(err) != codes.NotFound {
		t.Fatalf("deleting again: %v, want NotFound", err)
	}
	_, err = allotctl(t, append(with, "override", "set", "--rule", "api-per-key", "--key", "k", "--limit", "0")...)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("set --limit 0: %v, want InvalidArgument naming limit", err)
	}
}

// Mistakes on the command line are said before anything is sent.
func TestCommandLineErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"rules"}, "unknown command"},
		{[]string{"override", "frob"}, "unknown command override \"frob\""},
		{[]string{"override", "get", "api", "k"}, "--rule and --key"},
		{[]string{"override", "set", "--expires", "tomorrow"}, "RFC 3339"},
		{[]string{"--token-file", "/nonexistent", "override", "get"}, "--token-file"},
	} {
		_, err := allotctl(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allotctl %q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	t.Setenv("ALLOTCTL_TOKEN", adminToken)
	if _, err := allotctl(t, "override", "get", "--rule", "r", "--key", "k"); err == nil || !strings.Contains(err.Error(), "needs TLS") {
		t.Errorf("a token without TLS: %v, want a refusal before it is sent", err)
	}
}
