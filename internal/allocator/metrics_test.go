package allocator_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

const metricsRules = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 100
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
          rate_limit: { unit: second, requests_per_unit: 10 }
        - key: path
          rate_limit: { unit: minute, requests_per_unit: 5 }
          shadow_mode: true
        - key: internal
          rate_limit: { unlimited: true }
`

// exposition is one scrape of /metrics: each sample's value by its name
// and labels as the text format writes them (labels sorted by name), and
// each family's help.
type exposition struct {
	samples map[string]string
	help    map[string]string
}

func scrapeMetrics(t *testing.T, addr string) exposition {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	e := exposition{samples: map[string]string{}, help: map[string]string{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			e.help[name] = help
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		e.samples[line[:i]] = line[i+1:]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return e
}

// want reports each series that is missing or has another value.
func (e exposition) want(t *testing.T, value string, series ...string) {
	t.Helper()
	for _, s := range series {
		if got, ok := e.samples[s]; !ok {
			t.Errorf("no series %s", s)
		} else if got != value {
			t.Errorf("%s = %s, want %s", s, got, value)
		}
	}
}

func writeRules(t *testing.T, path, doc string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Every series a dashboard or an alert reads exists from start, at zero:
// a counter born at its first event hides that event from rate() and
// increase() (the first failed reload never showed in
// increase(allot_allocator_rule_reloads_total{result="error"}[1h])). The
// series known at start are per rule, result, method, store operation and
// Envoy domain and limit; a reload adds those of its new rules. The store
// is up (1) and the rules' version is a label of allot_allocator_rules_info,
// replaced on reload.
func TestMetricsExistFromStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, metricsRules)
	a, _ := start(t, allocator.Config{RulesFile: path, MetricsListen: "127.0.0.1:0"})
	m := scrapeMetrics(t, a.MetricsAddr())

	m.want(t, "0", `allot_allocator_rule_reloads_total{result="ok"}`, `allot_allocator_rule_reloads_total{result="error"}`,
		`allot_allocator_inflight_calls`, `allot_allocator_live_nodes`, `allot_allocator_new_keys_refused_total`,
		`allot_envoy_partial_charges_total`)
	for _, rule := range []string{"api", "login"} {
		m.want(t, "0",
			`allot_allocator_lease_wanted_tokens_total{rule="`+rule+`"}`,
			`allot_allocator_lease_granted_tokens_total{rule="`+rule+`"}`,
			`allot_allocator_lease_holders_count{rule="`+rule+`"}`,
			`allot_allocator_check_decisions_total{result="allowed",rule="`+rule+`"}`,
			`allot_allocator_check_decisions_total{result="denied",rule="`+rule+`"}`)
	}
	for _, method := range []string{"Acquire", "Release", "Check", "GetRules", "ShouldRateLimit"} {
		m.want(t, "0",
			`allot_allocator_requests_total{code="OK",method="`+method+`"}`,
			`allot_allocator_requests_total{code="Unavailable",method="`+method+`"}`,
			`allot_allocator_requests_total{code="ResourceExhausted",method="`+method+`"}`,
			`allot_allocator_request_seconds_count{method="`+method+`"}`)
	}
	for _, op := range []string{"acquire", "release", "check", "envoy_check", "envoy_peek"} {
		m.want(t, "0", `allot_allocator_store_seconds_count{op="`+op+`",result="ok"}`,
			`allot_allocator_store_seconds_count{op="`+op+`",result="error"}`)
	}
	ip := rules.EnvoyRuleName("edge", "", []rules.EnvoyEntry{{Key: "ip"}}, time.Second)
	shadow := rules.EnvoyRuleName("edge", "", []rules.EnvoyEntry{{Key: "path"}}, time.Minute)
	unlimited := rules.EnvoyRuleName("edge", "", []rules.EnvoyEntry{{Key: "internal"}}, 0)
	m.want(t, "0",
		`allot_envoy_requests_total{code="OK",domain="edge"}`,
		`allot_envoy_requests_total{code="OVER_LIMIT",domain="edge"}`,
		`allot_envoy_requests_total{code="OK",domain="unknown"}`,
		`allot_envoy_descriptors_total{domain="edge",result="no_limit",rule=""}`,
		`allot_envoy_descriptors_total{domain="edge",result="ok",rule="`+ip+`"}`,
		`allot_envoy_descriptors_total{domain="edge",result="over_limit",rule="`+ip+`"}`,
		`allot_envoy_descriptors_total{domain="edge",result="ok",rule="override"}`,
		`allot_envoy_descriptors_total{domain="edge",result="ok",rule="`+shadow+`"}`,
		`allot_envoy_descriptors_total{domain="edge",result="unlimited",rule="`+unlimited+`"}`,
		`allot_envoy_shadow_over_limit_total{domain="edge",rule="`+shadow+`"}`)

	first := a.Rules().Version()
	m.want(t, "1", `allot_allocator_store_up`, `allot_allocator_rules_info{version="`+first+`"}`)
	for _, method := range []string{"Acquire", "Release", "Check", "ShouldRateLimit"} {
		if help := m.help["allot_allocator_inflight_calls"]; !strings.Contains(help, method) {
			t.Errorf("allot_allocator_inflight_calls: help %q does not name %s, which it counts", help, method)
		}
	}

	writeRules(t, path, strings.Replace(metricsRules, "rules:\n", "rules:\n  - name: search\n    algorithm: fixed_window\n    limit: 10\n    period: 1s\n", 1))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	second := a.Rules().Version()
	if second == first {
		t.Fatalf("a new rule kept version %s", first)
	}
	m = scrapeMetrics(t, a.MetricsAddr())
	m.want(t, "1", `allot_allocator_rules_info{version="`+second+`"}`, `allot_allocator_rule_reloads_total{result="ok"}`)
	m.want(t, "0", `allot_allocator_lease_wanted_tokens_total{rule="search"}`,
		`allot_allocator_check_decisions_total{result="denied",rule="search"}`)
	if v, ok := m.samples[`allot_allocator_rules_info{version="`+first+`"}`]; ok {
		t.Errorf("the version before the reload is still exported (%s)", v)
	}
}

// probedStore is the memory store with a probe the test turns off.
type probedStore struct {
	*store.Memory
	down atomic.Bool
}

func (s *probedStore) Probe(context.Context) error {
	if s.down.Load() {
		return store.ErrUnavailable
	}
	return nil
}

// allot_allocator_store_up follows the store probe that health follows:
// 0 within a probe of the store going down, 1 once it answers again.
func TestStoreUpFollowsTheProbe(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	st := &probedStore{Memory: store.NewMemory(clk)}
	st.down.Store(true)
	a, _ := start(t, allocator.Config{Rules: uniqueRules(t, exactRules), Store: st, MetricsListen: "127.0.0.1:0", Clock: clk})
	scrapeMetrics(t, a.MetricsAddr()).want(t, "0", "allot_allocator_store_up") // down at start
	st.down.Store(false)
	tick(t, clk)
	scrapeMetrics(t, a.MetricsAddr()).want(t, "1", "allot_allocator_store_up")
	st.down.Store(true)
	tick(t, clk)
	scrapeMetrics(t, a.MetricsAddr()).want(t, "0", "allot_allocator_store_up")
}
