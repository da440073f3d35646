package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegionFlags(t *testing.T) {
	t.Setenv("ALLOT_PARENT", "10.0.0.1:7070")
	t.Setenv("ALLOT_REGION", "eu")
	o, err := parse([]string{"--region", "us"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.parent != "10.0.0.1:7070" || o.region != "us" {
		t.Fatalf("parent %q, region %q: want ALLOT_PARENT's, and --region over ALLOT_REGION", o.parent, o.region)
	}
	t.Setenv("ALLOT_REGION", "")
	if err := run([]string{"--metrics", ""}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--parent: needs --region") {
		t.Fatalf("--parent without --region: %v", err)
	}
}

// The parent's TLS files and token come from ALLOT_PARENT_TLS_* and
// ALLOT_PARENT_TOKEN_FILE, a flag winning; a file that does not load is
// an error naming the flag and the file.
func TestParentTLSFlags(t *testing.T) {
	t.Setenv("ALLOT_PARENT_TLS_CA", "/env/ca.pem")
	t.Setenv("ALLOT_PARENT_TLS_CERT", "/env/region.crt")
	t.Setenv("ALLOT_PARENT_TLS_KEY", "/env/region.key")
	t.Setenv("ALLOT_PARENT_TOKEN_FILE", "/env/token")
	o, err := parse([]string{"--parent-tls-cert", "/flag/region.crt"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.parentTLSCA != "/env/ca.pem" || o.parentTLSCert != "/flag/region.crt" || o.parentTLSKey != "/env/region.key" || o.parentToken != "/env/token" {
		t.Fatalf("ca %q, cert %q, key %q, token %q: want the environment's, --parent-tls-cert's over it",
			o.parentTLSCA, o.parentTLSCert, o.parentTLSKey, o.parentToken)
	}
	missing := filepath.Join(t.TempDir(), "region.crt")
	err = run([]string{"--metrics", "", "--parent", "127.0.0.1:1", "--region", "eu", "--parent-tls-cert", missing, "--parent-token-file", ""}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--parent-tls-cert") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing --parent-tls-cert: %v", err)
	}
}
