package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
)

// The service dials an mTLS allocator with --ca, --cert, --key and a
// --node-id its certificate names: the rules arrive (RateLimit-Policy on
// /hello) only through the authenticated connection.
func TestRunOverMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "dev-ca")
	caFile := ca.Write(t, dir, "ca.crt")
	certFile, keyFile := ca.Issue(t, certstest.Loopback).Write(t, dir, "allocator")
	nodeCert, nodeKey := ca.Issue(t, certstest.Names{CN: "service-1"}).Write(t, dir, "service-1")
	a, err := allocator.New(allocator.Config{Logger: quiet(),
		TLS: allocator.TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}})
	if err != nil {
		t.Fatal(err)
	}
	go a.Serve()
	t.Cleanup(a.Stop)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--allocators", a.Addr(), "--node-id", "service-1",
			"--ca", caFile, "--cert", nodeCert, "--key", nodeKey}, func(string) string { return "" }, w)
		w.Close()
	}()
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "msg=serving addr="); ok {
				listening <- strings.Fields(rest)[0]
			}
		}
	}()
	var base string
	select {
	case base = <-listening:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + base + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if strings.Contains(resp.Header.Get("Ratelimit-Policy"), "api-per-key") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no rules from the allocator over mTLS within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTLSFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert", "c.pem", "--key", "k.pem"}, "need --ca"},
		{[]string{"--ca", "/nonexistent/ca.pem"}, "--ca"},
		{[]string{"--ca", "/nonexistent/ca.pem", "--cert", "c.pem"}, "--cert and --key"},
		{[]string{"--ca", "/nonexistent/ca.pem", "--cert", "c.pem", "--key", "k.pem"}, "--cert, --key, --ca"},
	} {
		err := run(context.Background(), append(c.args, "--listen", "127.0.0.1:0"), func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}
