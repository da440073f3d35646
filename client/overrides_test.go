package client_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/rules"
)

const overrideRulesV1 = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 20
    period: 1s
    burst: 20
    lease: { ttl: 1s, refresh: 100ms }
`

// The v2 file gives one key ten times the limit.
const overrideRulesV2 = overrideRulesV1 + `    overrides:
      - key: premium
        limit: 200
`

// newReloadableFleet runs a fleet whose allocator serves a rules file.
func newReloadableFleet(t *testing.T, yaml string, nodes int, cfg func(int, *client.Config)) (*fleet, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFleetWith(t, yaml, path, nodes, cfg)
	return f, path
}

// An override added by a reload reaches every node within about one
// refresh: each node learns the new rules version from its next lease
// answer, fetches the rules, and its key's pool takes the override's rule;
// the allocator applies it from the reload on. The premium key then runs
// at its own limit, fleet-wide, and the other keys keep theirs.
func TestOverrideReachesTheFleetAfterReload(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet run")
	}
	f, path := newReloadableFleet(t, overrideRulesV1, 3, nil)
	ctx := context.Background()
	for _, n := range f.nodes {
		leased(t, n, "api", "premium")
	}
	if err := os.WriteFile(path, []byte(overrideRulesV2), 0o600); err != nil {
		t.Fatal(err)
	}
	// Keep the key busy (so it renews) while waiting for the nodes to learn.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
					_, _ = n.AllowN(ctx, "api", "premium", 1)
				}
			}
		}()
	}
	reloaded := time.Now()
	if err := f.alloc.Reload(); err != nil {
		t.Fatal(err)
	}
	learned := make([]time.Duration, len(f.nodes))
	for i, n := range f.nodes {
		waitUntil(t, 5*time.Second, func() bool {
			r, _ := n.Rule("api")
			return len(r.Overrides) == 1
		}, "the node to fetch the new rules")
		learned[i] = time.Since(reloaded)
	}
	close(stop)
	wg.Wait()
	t.Logf("nodes applied the override %v after the reload (lease refresh 100ms, ttl 1s)", learned)
	for i, d := range learned {
		if d > time.Second {
			t.Errorf("node %d applied the override %v after the reload, more than a lease TTL", i, d)
		}
	}

	const T = 3 * time.Second
	set, err := rules.Parse("v2", []byte(overrideRulesV2))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := set.Get("api")
	premium, plain := api.ForKey("premium"), api.ForKey("plain")
	var lp, lq *load
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); lp = f.run("api", "premium", uniform(3, 2*premium.Rate()/3), T, nil) }()
	go func() { defer both.Done(); lq = f.run("api", "plain", uniform(3, 2*plain.Rate()/3), T, nil) }()
	both.Wait()
	for _, c := range []struct {
		name string
		r    *rules.Rule
		l    *load
	}{{"premium", premium, lp}, {"plain", plain, lq}} {
		got := float64(c.l.total())
		ideal := float64(c.r.Burst) + c.r.Rate()*T.Seconds()
		bound := ideal + c.r.Rate()*c.r.Lease.TTL.Seconds()
		t.Logf("%s (limit %d/s, burst %d): admitted %.0f in %v, %.3f of the ideal %.0f (bound %.0f)", c.name, c.r.Limit, c.r.Burst, got, T, got/ideal, ideal, bound)
		if got > bound {
			t.Errorf("%s: admitted %.0f > burst + rate·(T + ttl) = %.0f", c.name, got, bound)
		}
		if got < 0.85*c.r.Rate()*T.Seconds() {
			t.Errorf("%s: admitted %.0f < 85%% of rate·T = %.0f: the override is not applied", c.name, got, c.r.Rate()*T.Seconds())
		}
	}
}

const shadowRules = `
rules:
  - name: rollout
    algorithm: token_bucket
    limit: 20
    period: 1s
    burst: 20
    shadow: true
    lease: { ttl: 1s, refresh: 100ms }
`

// A shadow rule lets every request through, marks the ones it would have
// refused, and counts them; what it really admits stays within the rule,
// so the marks are the refusals the rule would make.
func TestShadowRuleNeverRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet run")
	}
	regs := make([]*prometheus.Registry, 3)
	f := newFleet(t, shadowRules, 3, func(i int, c *client.Config) {
		regs[i] = prometheus.NewRegistry()
		c.Registerer = regs[i]
	})
	r, _ := f.set.Get("rollout")
	const T = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), T)
	defer cancel()
	var decided, refused, shadowed atomic.Int64
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond) // 200/s a node: 30× the limit over the fleet
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				d, err := n.AllowN(ctx, "rollout", "k", 1)
				if err != nil {
					continue
				}
				decided.Add(1)
				if !d.Allowed {
					refused.Add(1)
				}
				if d.Shadow {
					shadowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	admitted := decided.Load() - shadowed.Load()
	bound := float64(r.Burst) + r.Rate()*(T.Seconds()+r.Lease.TTL.Seconds())
	var counted float64
	for _, reg := range regs {
		counted += counterSum(t, reg, "allot_client_decisions_total", "result", "shadow_denied")
	}
	t.Logf("decided %d, refused %d, marked shadow %d (metric %.0f); really admitted %d (bound %.0f)",
		decided.Load(), refused.Load(), shadowed.Load(), counted, admitted, bound)
	if refused.Load() != 0 {
		t.Fatalf("a shadow rule refused %d requests", refused.Load())
	}
	if float64(admitted) > bound || float64(admitted) < 0.85*r.Rate()*T.Seconds() {
		t.Fatalf("admitted without the shadow mark %d, want within [%.0f, %.0f]: the rule must still count", admitted, 0.85*r.Rate()*T.Seconds(), bound)
	}
	if counted != float64(shadowed.Load()) {
		t.Fatalf("allot_client_decisions_total{result=shadow_denied} = %.0f, want the %d decisions marked Shadow", counted, shadowed.Load())
	}
}

// counterSum adds the counters of a family whose label has value.
func counterSum(t *testing.T, reg *prometheus.Registry, family, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabel(m, label, value) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name && strings.EqualFold(lp.GetValue(), value) {
			return true
		}
	}
	return false
}
