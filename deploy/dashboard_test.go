package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
)

const rulesDoc = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 1000
    period: 1m
  - name: login
    algorithm: sliding_log
    limit: 5
    period: 15m
envoy:
  domains:
    - domain: edge
      descriptors:
        - key: ip
          rate_limit: { unit: day, requests_per_unit: 1 }
          shadow_mode: true
`

// dashboard is what the test reads of the Grafana JSON.
type dashboard struct {
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var metricName = regexp.MustCompile(`\ballot_[a-z0-9_]+`)

// Every metric the dashboard queries exists on a live allocator and a live
// client once they have served a little traffic, every panel reads the
// provisioned data source, and docs/operations.md lists every metric they
// export.
func TestDashboardQueriesLiveMetrics(t *testing.T) {
	var d dashboard
	readJSON(t, "grafana/dashboards/allot.json", &d)
	queried := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != datasourceUID(t) || p.GridPos.X+p.GridPos.W > 24 || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, grid %+v, %d queries", p.Title, p.Datasource.UID, p.GridPos, len(p.Targets))
		}
		for _, target := range p.Targets {
			for _, m := range metricName.FindAllString(target.Expr, -1) {
				queried[m] = true
			}
		}
	}
	if d.UID == "" || len(queried) < 15 {
		t.Fatalf("dashboard uid %q queries %d metrics", d.UID, len(queried))
	}

	allocatorURL, clientURL := liveFleet(t)
	var exported map[string]bool
	deadline := time.Now().Add(20 * time.Second)
	for { // leases and round trips are recorded when a background refill returns
		var samples map[string]bool
		samples, exported = scrape(t, allocatorURL, clientURL)
		missing := absent(queried, samples)
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard queries metrics no live allocator or client exports: %v", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
	list, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range exported {
		if !strings.Contains(string(list), "`"+name+"`") {
			t.Errorf("docs/operations.md does not list %s", name)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// datasourceUID is the uid Grafana is provisioned with.
func datasourceUID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("grafana/provisioning/datasources/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Datasources []struct{ UID string } `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Datasources) != 1 {
		t.Fatalf("datasources: %v %+v", err, doc)
	}
	return doc.Datasources[0].UID
}

// liveFleet runs an allocator and a client on 127.0.0.1, has them serve a
// little of everything the dashboard shows (leases, a strict check, an
// Envoy request over a shadow limit, a reload), and returns the URLs of
// their /metrics.
func liveFleet(t *testing.T) (allocatorURL, clientURL string) {
	quiet := slog.New(slog.DiscardHandler)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(allocator.Config{RulesFile: path, MetricsListen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	c, err := client.New(client.Config{Allocators: []string{a.Addr()}, Registerer: reg, Logger: quiet, CheckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 50 {
		c.Allow(ctx, "api", "user-1")
	}
	if _, err := c.AllowN(ctx, "login", "alice", 1); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	for range 2 { // the second is over the shadow limit
		if _, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0.0.1"}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return "http://" + a.MetricsAddr() + "/metrics", srv.URL
}

// scrape reads the exposition of every URL as Prometheus would: the names
// of the samples (histograms as _bucket, _sum and _count), and the
// families named allot_*.
func scrape(t *testing.T, urls ...string) (samples, families map[string]bool) {
	t.Helper()
	samples, families = map[string]bool{}, map[string]bool{}
	for _, u := range urls {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				if name := strings.Fields(rest)[0]; strings.HasPrefix(name, "allot_") {
					families[name] = true
				}
				continue
			}
			if line == "" || line[0] == '#' {
				continue
			}
			samples[line[:strings.IndexAny(line, "{ ")]] = true
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return samples, families
}

func absent(want, have map[string]bool) []string {
	var out []string
	for name := range want {
		if !have[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// docker-compose.yml mounts these files; a path that moved would leave
// Prometheus or Grafana empty.
func TestComposeMountsTheseFiles(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"prometheus/prometheus.yml", "grafana/provisioning", "grafana/dashboards"} {
		if !strings.Contains(string(b), "./deploy/"+p+":") {
			t.Errorf("docker-compose.yml does not mount ./deploy/%s", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}
