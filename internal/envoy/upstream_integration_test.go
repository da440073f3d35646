package envoy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/store"
)

// integrationRuntime is envoyproxy/ratelimit's test/integration runtime:
// RUNTIME_ROOT runtime/current, RUNTIME_SUBDIRECTORY ratelimit, the config
// files in config/ and the files its reload tests copy in beside it.
var integrationRuntime = filepath.Join(upstreamRoot, "test/integration/runtime/current/ratelimit")

// runtimeCopy copies the runtime's config directory, but for the files
// left out, to a directory of the same layout the test may change, and
// returns its config directory.
func runtimeCopy(t *testing.T, leaveOut ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "runtime", "current", "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(integrationRuntime, "config")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(leaveOut, e.Name()) {
			copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The directory as envoyproxy/ratelimit's integration tests lay it out
// does not load: sanitize.yaml's value_to_metric puts descriptor values in
// metric names, which Allot refuses with the file, line and field
// (docs/envoy.md, "Not supported, and why"), and a file refused is the
// whole directory refused, as a bad rules file is. Without that file the
// rest loads; the cases below are served from it.
func TestUpstreamIntegrationDirRefusesValueToMetric(t *testing.T) {
	dir := filepath.Join(integrationRuntime, "config")
	mem := store.NewMemory(clock.NewFake(t0))
	defer mem.Close()
	_, err := allocator.New(allocator.Config{EnvoyConfigDir: dir, Store: mem, Logger: quiet()})
	want := filepath.Join(dir, "sanitize.yaml") + ":4: descriptors[0].value_to_metric: not supported: "
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want it to contain %q", err, want)
	}
}

// test/integration/integration_test.go's cases (testBasicBaseConfig and
// TestShareThreshold), each from a fresh store. Its key names with
// "_local" are the same cases with its local over-limit cache on, which
// does not change an answer; the random values of its keys are fixed
// values here, each case having its own store.
func TestUpstreamIntegrationCases(t *testing.T) {
	dir := runtimeCopy(t, "sanitize.yaml")
	key23 := ds(d("key2=7"), d("key3=7"))
	cases := []upstreamCase{
		{"unknown domain: OK without a limit", "", "foo", []step{
			{ds: one("hello=world"), overall: ok, want: []answer{none}},
			{ds: one("hello_local=world"), overall: ok, want: []answer{none}},
		}},
		{"basic key1: 50 a second", "", "basic", []step{
			{ds: one("key1=foo"), overall: ok, want: []answer{lim(ok, 50, 49, 1)}},
			{ds: one("key1_local=foo"), overall: ok, want: []answer{lim(ok, 50, 49, 1)}},
		}},
		{"basic one_per_minute", "", "basic", []step{
			{ds: one("one_per_minute=x"), overall: ok, want: []answer{lim(ok, 1, 0, 50)}},
			{ds: one("one_per_minute=x"), overall: over, want: []answer{lim(over, 1, 0, 50)}},
		}},
		{"another key2: 25 asks of 20 a minute", "", "another", []step{
			{n: 20, ds: one("key2=42"), overall: ok, want: []answer{lim(ok, 20, 19, 50).spends()}},
			{n: 5, ds: one("key2=42"), overall: over, want: []answer{lim(over, 20, 0, 50)}},
			{n: 20, ds: one("key2_local=42"), overall: ok, want: []answer{lim(ok, 20, 19, 50).spends()}},
		}},
		// The 5 requests key3 refuses are not charged on key2, which says
		// 10 left each time; envoyproxy/ratelimit charges them (9, 8, ...
		// 5): docs/envoy.md, "Charging refused hits".
		{"another key2 and key3: 15 asks, key3 10 an hour", "", "another", []step{
			{n: 10, ds: key23, overall: ok, want: []answer{lim(ok, 20, 19, 50).spends(), lim(ok, 10, 9, 3590).spends()}},
			{n: 5, ds: key23, overall: over, want: []answer{lim(ok, 20, 10, 50), lim(over, 10, 0, 3590)}},
		}},
		{"another key4: duration_until_reset counts down", "", "another", []step{
			{ds: one("key4=durTest"), overall: ok, want: []answer{lim(ok, 20, 19, 86390)}},
			{wait: 2 * time.Second, ds: one("key4=durTest"), overall: ok, want: []answer{lim(ok, 20, 18, 86388)}},
			{ds: one("key4_local=durTest"), overall: ok, want: []answer{lim(ok, 20, 19, 86388)}},
		}},
		{"TestShareThreshold: files/* shares, files_no_share/* does not", "", "share-threshold-test", []step{
			{n: 10, ds: one("files=files/a.pdf"), overall: ok, want: []answer{lim(ok, 10, 9, 3590).spends()}},
			{ds: one("files=files/b.csv"), overall: over, want: []answer{lim(over, 10, 0, 3590)}},
			{ds: one("files_no_share=files_no_share/1"), overall: ok, want: []answer{lim(ok, 10, 9, 3590)}},
			{ds: one("files_no_share=files_no_share/2"), overall: ok, want: []answer{lim(ok, 10, 9, 3590)}},
			{ds: one("files_no_share=files_no_share/3"), overall: ok, want: []answer{lim(ok, 10, 9, 3590)}},
		}},
		// basic_headers is its test of LIMIT_RESPONSE_HEADERS_ENABLED; the
		// answer is the same, the headers are the envoy section's headers
		// setting in Allot (docs/envoy.md, "Not supported, and why").
		{"basic_headers key1", "", "basic_headers", []step{
			{ds: one("key1=foo"), overall: ok, want: []answer{lim(ok, 50, 49, 1)}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			serveDir(t, dir).steps(t, c.domain, c.steps)
		})
	}
}

// testConfigReload: a file copied into the config directory adds its
// domain on reload (SIGHUP in Allot, which does not watch the directory;
// docs/envoy.md), and removing it takes the domain away again.
func TestUpstreamIntegrationReload(t *testing.T) {
	dir := runtimeCopy(t, "sanitize.yaml")
	r := serveDir(t, dir)
	r.steps(t, "reload", []step{{ds: one("block=foo"), overall: ok, want: []answer{none}}})

	copyFile(t, filepath.Join(integrationRuntime, "reload.yaml"), filepath.Join(dir, "reload.yaml"))
	if err := r.a.Reload(); err != nil {
		t.Fatal(err)
	}
	r.steps(t, "reload", []step{
		{ds: one("key1=foo"), overall: ok, want: []answer{lim(ok, 50, 49, 1)}},
		{ds: one("block=foo"), overall: over, want: []answer{lim(over, 0, 0, 1)}},
	})

	if err := os.Remove(filepath.Join(dir, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := r.a.Reload(); err != nil {
		t.Fatal(err)
	}
	r.steps(t, "reload", []step{{ds: one("key1=foo"), overall: ok, want: []answer{none}}})
}

// existingDomainreload.yaml gives domain basic a second time. Without
// MERGE_DOMAIN_CONFIG envoyproxy/ratelimit refuses such a config and
// keeps the one it has; so does Allot's reload, naming both files.
func TestUpstreamIntegrationReloadOfAnExistingDomain(t *testing.T) {
	dir := runtimeCopy(t, "sanitize.yaml")
	r := serveDir(t, dir)
	r.steps(t, "basic", []step{{ds: one("key1=foo"), overall: ok, want: []answer{lim(ok, 50, 49, 1)}}})

	copyFile(t, filepath.Join(integrationRuntime, "existingDomainreload.yaml"), filepath.Join(dir, "existingDomainreload.yaml"))
	err := r.a.Reload()
	want := filepath.Join(dir, "existingDomainreload.yaml") + `:1: domain: domain "basic" is given twice (also in ` + filepath.Join(dir, "basic.yaml") + ":1)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("reload: %v, want it to contain %s", err, want)
	}
	r.steps(t, "basic", []step{
		{ds: one("key1=foo"), overall: ok, want: []answer{lim(ok, 50, 48, 1)}},
		{ds: one("key11=foo"), overall: ok, want: []answer{none}},
	})
}
