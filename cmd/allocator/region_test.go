package main

import (
	"bytes"
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
