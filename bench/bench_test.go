package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/redistest"
)

// The test binary doubles as the bench's allocator process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == allocatorFlag {
		if err := serveAllocator(os.Args[2:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A short run of the whole bench, so that it cannot rot: every scenario
// and strategy runs against a real Redis and a real allocator process, and
// the report and plots are written. The figures of a short run on a busy
// machine under the race detector are not the bench's figures; the test
// checks that the instrument works and tells strategies apart. Gubernator
// is left out: its first build takes minutes (TestGubernator checks it,
// on demand).
func TestShortRun(t *testing.T) {
	out := t.TempDir()
	cfg, err := parseFlags([]string{"--short", "--nodes", "4", "--out", out, "--redis", redistest.URL(t), "--gubernator=false"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.md", "lease-accuracy.png", "lease-redis.png", "failover.png", "distance.png", "keys.png", "regions.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "results.md"))
	for _, want := range []string{"allot adaptive", "Redis Lua per request", "Check RPC per request", "local only (limit/N)", "## Failover", "## The figures",
		"## Distance", "allot rate shares", "allot tokens only", "## Many keys", "2000 keys", "per key touched once",
		"## Regions", "tree: parent and regions", "one shared Redis", "independent limits (limit/3)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, w := range rep.rows {
		if w.res.decided == 0 || w.res.admitted == 0 {
			t.Errorf("%s / %s decided %d, admitted %d", w.scenario, w.strategy, w.res.decided, w.res.admitted)
		}
		if acc := float64(w.res.admitted) / w.ideal; acc > 1.25 {
			t.Errorf("%s / %s admitted %.2f of the ideal", w.scenario, w.strategy, acc)
		}
	}
	// Under skew, splitting the limit evenly starves the hot node.
	hy, lo := rep.find("skew", "allot adaptive"), rep.find("skew", "local only (limit/N)")
	if hy == nil || lo == nil || float64(lo.res.admitted) >= float64(hy.res.admitted) {
		t.Errorf("skew: local-only admitted as much as the hybrid")
	}
	// Far from the allocator, rate shares keep what tokens alone lose.
	far := distanceScenario(200 * time.Millisecond)
	sh, tk := rep.find(far, "allot rate shares"), rep.find(far, "allot tokens only")
	if sh == nil || tk == nil || sh.res.admitted <= tk.res.admitted {
		t.Errorf("200ms away: rate shares did not admit more than tokens alone")
	}
	// Each way of holding the regions' limit ran, admitted, and counted
	// its calls; only the tree and the shared Redis have a far link.
	if len(rep.regions) != len(regionsApproaches) {
		t.Errorf("regions scenario: %d runs, want %d", len(rep.regions), len(regionsApproaches))
	}
	for _, w := range rep.regions {
		if acc := float64(w.res.admitted) / w.ideal; w.res.admitted == 0 || acc > 1.25 || w.node <= 0 || w.store <= 0 || (w.far > 0) != (w.approach != "independent") {
			t.Errorf("regions scenario, %s: admitted %d (%.2f of the ideal), per 1k admitted %.1f store calls, %.1f over the far link, %.1f node calls",
				w.label, w.res.admitted, acc, w.store, w.far, w.node)
		}
	}
	if rep.failover == nil || rep.failover.res.admitted == 0 {
		t.Error("no failover run")
	}
	// The keys scenario measured every figure it reports. (The sweep's CPU
	// with nothing due is the process's less its idle CPU: about zero, and
	// below it by noise, since quiet keys sleep out of the sweep; so may be
	// the flood's, whose keys take a few milliseconds of a short run's
	// seconds: its Acquire calls are counted instead.)
	if len(rep.keys) != 1 {
		t.Fatalf("keys scenario: %d sizes measured, want 1", len(rep.keys))
	}
	k := rep.keys[0]
	if k.adaptive == nil || k.redis == nil || k.held == 0 || k.heapLive <= 0 || k.trickle.touched == 0 || k.trickle.nodeUS <= 0 || k.flood.touched == 0 || k.flood.acquires <= 0 ||
		k.hold != 2000 || math.IsNaN(k.sweepPct) || k.heapHeld <= 0 || k.redisKeys == 0 || k.redisPerKey <= 0 {
		t.Errorf("keys scenario at 2000 keys: %+v", *k)
	}
}

func TestFlags(t *testing.T) {
	bad := [][]string{
		{"--nodes", "0"}, {"--leases", "1,x"}, {"--failure", "0.7,0.3"}, {"--skew", "1.5"}, {"--duration", "10ms"},
		{"--distance-rtts", "0,-5ms"}, {"--distance-rtts", "far"}, {"--distance-burst", "0"},
		{"--keys-sizes", "1"}, {"--keys-sizes", "10000,x"}, {"--keys-run", "100ms"}, {"--keys-touch-rate", "0"}, {"--keys-flood-rate", "0"}, {"--keys-flood", "0"}, {"--keys-ttl", "1ms"},
		{"--gubernator-algorithm", "sliding_window"},
		{"--regions-loads", "moving,spiky"}, {"--regions-run", "100ms"}, {"--regions-period", "0"},
	}
	for _, args := range bad {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%v) accepted", args)
		}
	}
}
