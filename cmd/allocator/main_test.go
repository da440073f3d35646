package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// The test binary doubles as the allocator: with ALLOT_TEST_MAIN set it
// runs main, so that signals reach a real process.
func TestMain(m *testing.M) {
	if os.Getenv("ALLOT_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("ALLOT_LISTEN", "127.0.0.1:1234")
	t.Setenv("ALLOT_STORE_TIMEOUT", "75ms")
	o, err := parse([]string{"--listen", "127.0.0.1:5678"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:5678" || o.storeTimeout != 75*time.Millisecond || o.metrics != "127.0.0.1:9090" {
		t.Fatalf("options %+v: the flag must win over ALLOT_LISTEN, ALLOT_STORE_TIMEOUT must apply", *o)
	}
	t.Setenv("ALLOT_DRAIN_TIMEOUT", "soon")
	if _, err := parse(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "ALLOT_DRAIN_TIMEOUT") {
		t.Fatalf("bad env value: %v", err)
	}
	os.Unsetenv("ALLOT_DRAIN_TIMEOUT")
	if _, err := parse([]string{"--help"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if err := run([]string{"--log-format", "xml"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("bad log format: %v", err)
	}
	if err := run([]string{"--config", "/nonexistent/rules.yaml", "--metrics", ""}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/rules.yaml") {
		t.Fatalf("missing rules file: %v", err)
	}
}

// startChild runs the allocator as a child process (this test binary,
// under ALLOT_TEST_MAIN) on free loopback ports, logging JSON, with env
// added to the test's (a later value of a variable wins); it is killed
// when the test ends. exited receives its Wait.
func startChild(t *testing.T, env ...string) (cmd *exec.Cmd, stderr *syncBuffer, exited chan error) {
	t.Helper()
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "ALLOT_TEST_MAIN=1", "ALLOT_LISTEN=127.0.0.1:0", "ALLOT_METRICS=",
		"ALLOT_LOG_FORMAT=json"), env...)
	stderr = &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, stderr, exited
}

// syncBuffer collects a child's stderr while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// SIGHUP reloads the rules file in a running process; a bad file is
// logged and the old rules stay; SIGTERM drains and exits 0.
func TestSignals(t *testing.T) {
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	write := func(s string) {
		if err := os.WriteFile(rulesPath, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("rules:\n  - name: first\n    algorithm: token_bucket\n    limit: 10\n    period: 1s\n")
	cmd, stderr, exited := startChild(t, "ALLOT_CONFIG="+rulesPath)

	addr := waitLog(t, stderr, `"grpc":"`, `"`)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := allotv1.NewAllocatorClient(conn)
	ruleNames := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := api.GetRules(ctx, &allotv1.GetRulesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range resp.Rules {
			names = append(names, r.Name)
		}
		return strings.Join(names, ",")
	}
	if got := ruleNames(); got != "first" {
		t.Fatalf("rules %q", got)
	}

	write("rules:\n  - name: broken\n    algorithm: token_bucket\n    limit: 0\n    period: 1s\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, stderr, "rules reload failed", "")
	if got := ruleNames(); got != "first" {
		t.Fatalf("a bad file replaced the rules: %q", got)
	}

	write("rules:\n  - name: second\n    algorithm: fixed_window\n    limit: 5\n    period: 1m\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, stderr, "rules reloaded", "")
	if got := ruleNames(); got != "second" {
		t.Fatalf("rules after SIGHUP %q, want second", got)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
}

// waitLog waits for a line containing after and returns what follows it up
// to until ("" returns nothing).
func waitLog(t *testing.T, buf *syncBuffer, after, until string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		s := buf.String()
		if i := strings.Index(s, after); i >= 0 {
			if until == "" {
				return ""
			}
			rest := s[i+len(after):]
			if j := strings.Index(rest, until); j >= 0 {
				return rest[:j]
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log %q within 20s; stderr:\n%s", after, buf.String())
	return ""
}

// The security and load flags have ALLOT_ variables too, and bad values
// name the flag.
func TestSecurityFlags(t *testing.T) {
	t.Setenv("ALLOT_TLS_CERT", "/etc/allot/tls.crt")
	t.Setenv("ALLOT_AUTH_TOKEN_FILE", "/etc/allot/tokens")
	t.Setenv("ALLOT_MAX_INFLIGHT", "64")
	t.Setenv("ALLOT_MEMORY_MAX_KEYS", "1000")
	o, err := parse([]string{"--tls-key", "/etc/allot/tls.key", "--reflection", "off"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.tlsCert != "/etc/allot/tls.crt" || o.tlsKey != "/etc/allot/tls.key" || o.tokenFile != "/etc/allot/tokens" ||
		o.maxInFlight != 64 || o.maxPerNode != 32 || o.reflection != "off" || o.getRules != "authenticated" || o.tlsNodeID != "{node}" ||
		o.memoryMaxKeys != 1000 {
		t.Fatalf("options %+v", *o)
	}
	os.Unsetenv("ALLOT_TLS_CERT")
	os.Unsetenv("ALLOT_AUTH_TOKEN_FILE")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reflection", "maybe"}, "--reflection"},
		{[]string{"--get-rules", "no"}, "--get-rules"},
		{[]string{"--max-inflight", "0"}, "--max-inflight"},
		{[]string{"--memory-max-keys", "0"}, "--memory-max-keys"},
		{[]string{"--tls-key", "k.pem"}, "--tls-cert and --tls-key"},
		{[]string{"--auth-token-file", "tokens"}, "--auth-token-file needs --tls-cert"},
		{[]string{"--metrics-tls", "yes"}, "--metrics-tls"},
	} {
		err := run(append(c.args, "--metrics", ""), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}
