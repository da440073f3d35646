package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With --metrics the service serves the SDK's metrics for Prometheus to
// scrape, on their own address: decisions, lease calls and the fallback
// state, after a request.
func TestMetricsEndpoint(t *testing.T) {
	addr := startAllocator(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--allocators", addr},
			func(string) string { return "" }, w)
		w.Close()
	}()
	found := make(chan [2]string, 1)
	go func() { // the "metrics" line comes before the "serving" one
		var metrics string
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "msg=metrics addr="); ok {
				metrics = strings.Fields(rest)[0]
			}
			if _, rest, ok := strings.Cut(sc.Text(), "msg=serving addr="); ok {
				found <- [2]string{strings.Fields(rest)[0], metrics}
			}
		}
	}()
	var addrs [2]string
	select {
	case addrs = <-found:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not start")
	}
	get := func(url string) string {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	get("http://" + addrs[0] + "/hello")
	body := get("http://" + addrs[1] + "/metrics")
	for _, want := range []string{`allot_client_decisions_total{mode="`, "allot_client_allocator_reachable 1", "allot_client_lease_granted_tokens_total", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(get("http://"+addrs[0]+"/metrics"), "allot_client") {
		t.Error("the API's port serves the metrics")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
