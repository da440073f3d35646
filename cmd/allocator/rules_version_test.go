package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// versionRules has what once made rules_version change at every parse:
// an envoy section whose limits hold pointers (their rules), nested
// descriptors, a replaces, a shadow_mode, a wildcard value shared by its
// matches, and a rule with overrides (which point at their rule).
const versionRules = `rules:
  - name: api
    algorithm: token_bucket
    limit: 10
    period: 1s
    overrides:
      - key: tenant-42
        limit: 1000
      - match: "premium-*"
        limit: 500
envoy:
  domains:
    - domain: messaging
      descriptors:
        - key: message_type
          value: marketing
          descriptors:
            - key: to_number
              rate_limit: { unit: day, requests_per_unit: 5 }
        - key: to_number
          rate_limit: { unit: day, requests_per_unit: 100 }
    - domain: shadow
      descriptors:
        - key: service
          descriptors:
            - key: user
              value: user-a
              rate_limit: { requests_per_unit: 10, unit: second }
              shadow_mode: true
            - key: user
              value: user-b
              rate_limit: { requests_per_unit: 20, unit: second }
    - domain: replacing
      descriptors:
        - key: key_1
          value: value_1
          descriptors:
            - key: user
              value: bkthomps
              rate_limit: { name: specific_limit, requests_per_unit: 5, unit: second }
        - key: key_2
          value: value_2
          descriptors:
            - key: user
              value: bkthomps
              rate_limit:
                replaces: [ { name: specific_limit } ]
                requests_per_unit: 10
                unit: second
    - domain: wildcard
      descriptors:
        - key: path
          value: /files/*
          share_threshold: true
          rate_limit: { unit: minute, requests_per_unit: 20, unit_multiplier: 5 }
`

// The allocator started three times, one after another, on one file with
// an envoy section serves one rules_version: in its start-up log, in
// allot_allocator_rules_info and in GetRules; and a SIGHUP of the same file
// keeps it (issue 17, item 2).
func TestRulesVersionIsTheSameAcrossRestarts(t *testing.T) {
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(versionRules), 0o600); err != nil {
		t.Fatal(err)
	}
	var versions []string
	for run := 1; run <= 3; run++ {
		cmd, stderr, exited := startChild(t, "ALLOT_CONFIG="+rulesPath, "ALLOT_METRICS=127.0.0.1:0")
		serving := waitLogLine(t, stderr, "allocator serving")
		v := logString(t, serving, "rules_version")
		if v == "" {
			t.Fatalf("run %d: no rules_version in %v", run, serving)
		}
		if n, _ := serving["envoy_limits"].(float64); n != 7 {
			t.Fatalf("run %d: envoy_limits %v, want the file's 7: %v", run, serving["envoy_limits"], serving)
		}
		if got := getRulesVersion(t, logString(t, serving, "grpc")); got != v {
			t.Fatalf("run %d: GetRules' version %q, the log's %q", run, got, v)
		}
		metrics := logString(t, serving, "metrics")
		if got := rulesInfoVersion(t, metrics); got != v {
			t.Fatalf("run %d: allot_allocator_rules_info{version=%q}, the log's %q", run, got, v)
		}
		versions = append(versions, v)
		if v != versions[0] {
			t.Fatalf("rules_version of run %d is %q, of run 1 %q: one file, two versions", run, v, versions[0])
		}

		if run == 3 {
			cmd.Process.Signal(syscall.SIGHUP)
			reloaded := waitLogLine(t, stderr, "rules reloaded")
			if got, prev := logString(t, reloaded, "rules_version"), logString(t, reloaded, "previous_version"); got != v || prev != v {
				t.Fatalf("SIGHUP of the same file: rules_version %q, previous_version %q, want %q both", got, prev, v)
			}
			if got := rulesInfoVersion(t, metrics); got != v {
				t.Fatalf("after SIGHUP: allot_allocator_rules_info{version=%q}, want %q", got, v)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("run %d: exit after SIGTERM: %v\n%s", run, err, stderr.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("run %d: no exit within 15s of SIGTERM", run)
		}
	}
	t.Logf("rules_version %s in all three runs and after SIGHUP", versions[0])
}

// waitLogLine waits (20s at most) for the JSON log line whose msg is msg
// and returns its fields.
func waitLogLine(t *testing.T, buf *syncBuffer, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(buf.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
				return line
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log %q within 20s; stderr:\n%s", msg, buf.String())
	return nil
}

func logString(t *testing.T, line map[string]any, key string) string {
	t.Helper()
	s, ok := line[key].(string)
	if !ok {
		t.Fatalf("log line without a string %s: %v", key, line)
	}
	return s
}

func getRulesVersion(t *testing.T, addr string) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := allotv1.NewAllocatorClient(conn).GetRules(ctx, &allotv1.GetRulesRequest{})
	if err != nil {
		t.Fatalf("GetRules at %s: %v", addr, err)
	}
	return resp.GetVersion()
}

var rulesInfo = regexp.MustCompile(`(?m)^allot_allocator_rules_info\{version="([^"]*)"\} 1$`)

// rulesInfoVersion scrapes addr's /metrics for the one
// allot_allocator_rules_info series and returns its version.
func rulesInfoVersion(t *testing.T, addr string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := rulesInfo.FindAllSubmatch(body, -1)
	if len(m) != 1 {
		t.Fatalf("/metrics has %d allot_allocator_rules_info series, want 1:\n%s", len(m), body)
	}
	return string(m[0][1])
}
