package allocator_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
)

const globalRules = `rules:
  - name: g
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 100
    scope: global
    lease: { ttl: 1s }
  - name: r
    algorithm: token_bucket
    limit: 10
    period: 1s
`

func TestRegionFlagsGoTogether(t *testing.T) {
	for _, c := range []struct {
		cfg  allocator.Config
		want string
	}{
		{allocator.Config{Parent: "127.0.0.1:1"}, "--parent: needs --region"},
		{allocator.Config{Region: "eu"}, "--region: names this allocator at its parent; give --parent too"},
		{allocator.Config{Regions: 3}, "--regions: is what a region cut off from its parent divides global rules by; give --parent too"},
		{allocator.Config{Parent: "127.0.0.1:1", Region: "eu", Regions: -1}, "--regions -1: want 0"},
	} {
		if _, err := allocator.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
	}
}

// A region leases a global rule's key from its parent under its name, and
// lends its node tokens alone, for less than the rule's TTL; a regional
// rule's key never reaches the parent. The parent, without a parent of its
// own, says once that it serves global rules from its store.
func TestRegionLeasesGlobalRulesFromItsParent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, globalRules)
	var rootLogs, regionLogs syncBuffer
	root, rootConn := start(t, allocator.Config{RulesFile: path, Logger: slog.New(slog.NewJSONHandler(&rootLogs, nil))})
	region, conn := start(t, allocator.Config{RulesFile: path, Parent: root.Addr(), Region: "eu",
		Logger: slog.New(slog.NewJSONHandler(&regionLogs, nil))})
	waitRecord(t, &regionLogs, "region: global rules are leased from the parent")

	api := allotv1.NewAllocatorClient(conn)
	resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{
		{Rule: "g", Key: "k", Want: 10, WantRate: 500, Demand: 40}, {Rule: "r", Key: "k", Want: 5, Demand: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	g, r := resp.Leases[0], resp.Leases[1]
	if g.Granted != 10 || g.Rate != 0 || g.Ttl.AsDuration() >= time.Second || g.Holders != 1 {
		t.Errorf("global lease %v: want 10 tokens, no rate, a TTL below the rule's 1s, one holder", g)
	}
	if r.Granted != 5 {
		t.Errorf("regional lease %v: want 5", r)
	}
	// At the parent the region is the key's one holder; the regional key
	// has no holder there.
	parent := allotv1.NewAllocatorClient(rootConn)
	resp, err = parent.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "other", Requests: []*allotv1.LeaseRequest{
		{Rule: "g", Key: "k", Want: 1}, {Rule: "r", Key: "k", Want: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Leases[0].Holders != 2 || resp.Leases[1].Holders != 1 {
		t.Errorf("at the parent: holders %d of the global key (want the region and this one), %d of the regional key (want 1)",
			resp.Leases[0].Holders, resp.Leases[1].Holders)
	}

	metrics, err := region.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	// It was asked the global key's 10 (the regional key's 5 are its
	// store's), all lent, and its demand is what n1 said of the global
	// key; the parent lent it at least those.
	want := map[string]float64{"allot_region_parent_up": 1, "allot_region_global_keys": 1, "allot_region_returned_dropped_total": 0,
		"allot_region_asked_total": 10, "allot_region_demand": 40, "allot_region_lent_total": 10, "allot_region_fallback_lent_total": 0}
	for _, mf := range metrics {
		switch v := mf.GetMetric()[0]; mf.GetName() {
		case "allot_region_parent_granted_total":
			if v.GetCounter().GetValue() < 10 {
				t.Errorf("allot_region_parent_granted_total = %v, want the 10 lent at least", v.GetCounter().GetValue())
			}
		case "allot_region_parent_answer_age_seconds":
			if age := v.GetGauge().GetValue(); age < 0 || age > 10 {
				t.Errorf("allot_region_parent_answer_age_seconds = %v just after the parent answered", age)
			}
		}
		if v, ok := want[mf.GetName()]; ok {
			m := mf.GetMetric()[0]
			got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if got != v {
				t.Errorf("%s = %v, want %v", mf.GetName(), got, v)
			}
			delete(want, mf.GetName())
		}
	}
	if len(want) > 0 {
		t.Errorf("metrics missing: %v", want)
	}

	const warning = "rules of scope global are served from this allocator's own store, as regional ones: right for the root of a tree of regions, " +
		"but each region without --parent limits them alone"
	waitRecord(t, &rootLogs, warning)
	if err := root.Reload(); err != nil {
		t.Fatal(err)
	}
	waitRecord(t, &rootLogs, "rules reloaded")
	if n, _ := count(rootLogs.records(t), warning); n != 1 {
		t.Errorf("the warning logged %d times, want once", n)
	}
	if n, _ := count(regionLogs.records(t), warning); n != 0 {
		t.Errorf("a region logged the warning")
	}
}
