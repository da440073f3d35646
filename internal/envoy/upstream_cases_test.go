package envoy_test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/store"
)

// The cases of envoyproxy/ratelimit's own documentation and tests, asked
// of Allot with the config files in envoyproxy/ratelimit's shape (domain
// and descriptors at the top level, one domain a file, no envoy: wrapper)
// in testdata/upstream, each directory laid out as envoyproxy/ratelimit
// reads it (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config):
//
//	readme/ratelimit/config                      its README's Examples 1-9
//	readme-example4-flat/ratelimit/config        Example 4's non-matching config
//	examples/ratelimit/config                    its examples directory, as the
//	                                             integration-test scripts use it
//	test/integration/runtime/current/ratelimit   its Go integration tests' runtime
//
// Each directory is served as --envoy-config-dir serves it (a real
// allocator on 127.0.0.1, asked through go-control-plane's client), on a
// memory store whose clock starts at t0, 10 s into a UTC day: a second's
// window resets in 1 s, a minute's in 50 s, an hour's in 3590 s and a
// day's in 86390 s, which is what envoyproxy/ratelimit says at that
// instant. Where Allot answers otherwise the case says so and why; each
// such difference is in docs/envoy.md, "Not supported, and why".
const upstreamRoot = "testdata/upstream"

// answer is one descriptor's status as the case expects it.
type answer struct {
	code  rlspb.RateLimitResponse_Code
	bare  bool   // no current_limit (no limit matched, replaced, or unlimited)
	limit uint32 // current_limit.requests_per_unit
	left  uint32 // limit_remaining at the first of the step's asks
	reset int64  // duration_until_reset in whole seconds; 0: none
	down  bool   // each further ask of the step leaves hits less
}

// lim is a limited status; none one with no limit; unlimited an
// unlimited descriptor's (limit_remaining 2^32-1, no current_limit).
func lim(code rlspb.RateLimitResponse_Code, limit, left uint32, reset int64) answer {
	return answer{code: code, limit: limit, left: left, reset: reset}
}

var (
	none      = answer{code: ok, bare: true}
	unlimited = answer{code: ok, bare: true, left: math.MaxUint32}
)

// spends marks a status whose limit_remaining falls at each ask.
func (a answer) spends() answer { a.down = true; return a }

// step is one question of a case, asked n times (0: once).
type step struct {
	wait    time.Duration // the clock moves this much first
	n       int
	hits    uint32     // the request's hits_addend (0: 1)
	ds      [][]string // descriptors, each of "key=value" entries
	overall rlspb.RateLimitResponse_Code
	want    []answer
}

// upstreamCase is one case of envoyproxy/ratelimit's, named after where it
// is documented or tested there.
type upstreamCase struct {
	name   string
	dir    string // under upstreamRoot, the RUNTIME_ROOT of its ratelimit/config
	domain string
	steps  []step
}

func d(entries ...string) []string           { return entries }
func ds(descs ...[]string) [][]string        { return descs }
func one(entries ...string) [][]string       { return ds(d(entries...)) }
func serveDir(t *testing.T, dir string) *rig { return serveDirAt(t, dir, t0) }

// serveDirAt serves an envoyproxy/ratelimit config directory as
// --envoy-config-dir does, on a memory store whose clock starts at now.
func serveDirAt(t *testing.T, dir string, now time.Time) *rig {
	t.Helper()
	clk := clock.NewFake(now)
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	r := serve(t, allocator.Config{EnvoyConfigDir: dir, Store: mem, Clock: clk})
	r.clk = clk
	return r
}

func runUpstream(t *testing.T, cases []upstreamCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := serveDir(t, filepath.Join(upstreamRoot, c.dir, "ratelimit", "config"))
			r.steps(t, c.domain, c.steps)
		})
	}
}

// steps asks each step and compares every answer with the case's.
func (r *rig) steps(t *testing.T, domain string, steps []step) {
	t.Helper()
	for i, s := range steps {
		r.clk.Advance(s.wait)
		descs := make([]*ratelimitpb.RateLimitDescriptor, len(s.ds))
		for j, entries := range s.ds {
			descs[j] = desc(entries...)
		}
		hits := max(s.hits, 1)
		for k := range max(s.n, 1) {
			resp := r.ask(t, domain, s.hits, descs...)
			compare(t, fmt.Sprintf("step %d %v, ask %d", i+1, s.ds, k+1), resp, s, uint32(k)*hits)
		}
	}
}

func compare(t *testing.T, what string, resp *rlspb.RateLimitResponse, s step, spent uint32) {
	t.Helper()
	got := resp.GetStatuses()
	if resp.GetOverallCode() != s.overall || len(got) != len(s.want) {
		t.Fatalf("%s: overall %v with %d statuses, want %v with %d", what, resp.GetOverallCode(), len(got), s.overall, len(s.want))
	}
	for i, w := range s.want {
		if w.down {
			w.left -= spent
		}
		st := got[i]
		var reset int64
		if du := st.GetDurationUntilReset(); du != nil {
			reset = du.GetSeconds()
			if du.GetNanos() != 0 {
				t.Errorf("%s: status %d: duration_until_reset %v is not whole seconds", what, i, du.AsDuration())
			}
		}
		l := st.GetCurrentLimit()
		if st.GetCode() != w.code || (l == nil) != w.bare || l.GetRequestsPerUnit() != w.limit ||
			st.GetLimitRemaining() != w.left || reset != w.reset {
			t.Fatalf("%s: status %d: %v, current_limit %v, remaining %d, reset %ds; want %v, limit %d (none: %v), remaining %d, reset %ds",
				what, i, st.GetCode(), l, st.GetLimitRemaining(), reset, w.code, w.limit, w.bare, w.left, w.reset)
		}
	}
}

// The README's "Examples" section, one file each in readme/ (Example 4's
// second configuration in readme-example4-flat/, as the same domain).
func TestUpstreamReadmeExamples(t *testing.T) {
	marketing := d("message_type=marketing", "to_number=2061111111")
	number := d("to_number=2061111111")
	userA, userB := d("service=auth-service", "user=user-a"), d("service=auth-service", "user=user-b")
	first, second := d("key_1=value_1", "user=bkthomps"), d("key_2=value_2", "user=bkthomps")
	runUpstream(t, []upstreamCase{
		{"Example 1: each value its own 500 a second", "readme", "mongo_cps", []step{
			{ds: one("database=users"), overall: ok, want: []answer{lim(ok, 500, 499, 1)}},
			{ds: one("database=default"), overall: ok, want: []answer{lim(ok, 500, 499, 1)}},
			{hits: 499, ds: one("database=users"), overall: ok, want: []answer{lim(ok, 500, 0, 1)}},
			{ds: one("database=users"), overall: over, want: []answer{lim(over, 500, 0, 1)}},
			{ds: one("database=other"), overall: ok, want: []answer{none}},
			{wait: time.Second, ds: one("database=users"), overall: ok, want: []answer{lim(ok, 500, 499, 1)}},
		}},
		// The README: "the service will rate limit against all matching
		// rules and return an aggregate result; a logical OR". A request
		// the marketing limit refuses is not charged on the per-number
		// limit (docs/envoy.md, "Charging refused hits"): envoyproxy/ratelimit
		// would say 94, 93, ... where Allot keeps 95.
		{"Example 2: 5 marketing and 100 messages a day to each number", "readme", "messaging", []step{
			{n: 5, ds: ds(marketing, number), overall: ok, want: []answer{lim(ok, 5, 4, 86390).spends(), lim(ok, 100, 99, 86390).spends()}},
			{n: 3, ds: ds(marketing, number), overall: over, want: []answer{lim(over, 5, 0, 86390), lim(ok, 100, 95, 86390)}},
			{ds: one("message_type=marketing", "to_number=2062222222"), overall: ok, want: []answer{lim(ok, 5, 4, 86390)}},
			{ds: one("to_number=2062222222"), overall: ok, want: []answer{lim(ok, 100, 99, 86390)}},
			{ds: one("message_type=marketing"), overall: ok, want: []answer{none}},
			{wait: 24 * time.Hour, ds: ds(marketing, number), overall: ok, want: []answer{lim(ok, 5, 4, 86390), lim(ok, 100, 99, 86390)}},
		}},
		{"Example 3: key and value before the key alone", "readme", "edge_proxy_per_ip", []step{
			{n: 10, ds: one("remote_address=50.0.0.1"), overall: ok, want: []answer{lim(ok, 10, 9, 1).spends()}},
			{ds: one("remote_address=50.0.0.1"), overall: over, want: []answer{lim(over, 10, 0, 1)}},
			{n: 2, ds: one("remote_address=50.0.0.5"), overall: over, want: []answer{lim(over, 0, 0, 1)}},
			{ds: one("remote_address=50.0.0.2"), overall: ok, want: []answer{lim(ok, 10, 9, 1)}},
			{wait: time.Second, ds: one("remote_address=50.0.0.1"), overall: ok, want: []answer{lim(ok, 10, 9, 1)}},
		}},
		{"Example 4: the nested config matches two entries", "readme", "example4", []step{
			{ds: one("key=value", "subkey=subvalue"), overall: ok, want: []answer{lim(ok, 300, 299, 1)}},
			{ds: one("key=value"), overall: ok, want: []answer{none}},
		}},
		{"Example 4: the one-level config does not", "readme-example4-flat", "example4", []step{
			{ds: one("key=value", "subkey=subvalue"), overall: ok, want: []answer{none}},
			{ds: one("key=value"), overall: ok, want: []answer{lim(ok, 300, 299, 1)}},
		}},
		{"Example 5: unlimited, and 100 a minute", "readme", "internal", []step{
			{n: 3, ds: one("ldap=cn"), overall: ok, want: []answer{unlimited}},
			{n: 100, ds: one("azure=sub"), overall: ok, want: []answer{lim(ok, 100, 99, 50).spends()}},
			{ds: ds(d("azure=sub"), d("ldap=cn")), overall: over, want: []answer{lim(over, 100, 0, 50), unlimited}},
			{wait: 50 * time.Second, ds: one("azure=sub"), overall: ok, want: []answer{lim(ok, 100, 99, 60)}},
		}},
		{"Example 6: user-a in shadow mode, user-b limited", "readme", "example6", []step{
			{n: 10, ds: ds(userA), overall: ok, want: []answer{lim(ok, 10, 9, 1).spends()}},
			{n: 5, ds: ds(userA), overall: ok, want: []answer{lim(ok, 10, 0, 1)}},
			{n: 20, ds: ds(userB), overall: ok, want: []answer{lim(ok, 20, 19, 1).spends()}},
			{ds: ds(userA, userB), overall: over, want: []answer{lim(ok, 10, 0, 1), lim(over, 20, 0, 1)}},
		}},
		{"Example 7: replaces", "readme", "example7", []step{
			{n: 5, ds: ds(first), overall: ok, want: []answer{lim(ok, 5, 4, 1).spends()}},
			{ds: ds(first), overall: over, want: []answer{lim(over, 5, 0, 1)}},
			{wait: time.Second, n: 10, ds: ds(first, second), overall: ok, want: []answer{none, lim(ok, 10, 9, 1).spends()}},
			{ds: ds(first, second), overall: over, want: []answer{none, lim(over, 10, 0, 1)}},
			{ds: ds(first), overall: ok, want: []answer{lim(ok, 5, 4, 1)}},
			{ds: ds(second), overall: over, want: []answer{lim(over, 10, 0, 1)}},
		}},
		// detailed_metric changes envoyproxy/ratelimit's stats names only;
		// Allot's metrics never carry values (docs/envoy.md).
		{"Example 8: detailed_metric limits as usual", "readme", "example8", []step{
			{n: 10, ds: one("key1=unspecified_value"), overall: ok, want: []answer{lim(ok, 10, 9, 50).spends()}},
			{ds: one("key1=unspecified_value"), overall: over, want: []answer{lim(over, 10, 0, 50)}},
			{ds: one("key1=unspecified_value2"), overall: ok, want: []answer{lim(ok, 10, 9, 50)}},
			{n: 20, ds: one("key1=value1"), overall: ok, want: []answer{lim(ok, 20, 19, 50).spends()}},
			{ds: one("key1=value1"), overall: over, want: []answer{lim(over, 20, 0, 50)}},
		}},
		{"Example 9: value* matches each value_N, counted apart", "readme", "example9", []step{
			{n: 20, ds: one("key1=value_1"), overall: ok, want: []answer{lim(ok, 20, 19, 50).spends()}},
			{ds: one("key1=value_1"), overall: over, want: []answer{lim(over, 20, 0, 50)}},
			{ds: one("key1=value_2"), overall: ok, want: []answer{lim(ok, 20, 19, 50)}},
			{ds: one("key1=valu"), overall: ok, want: []answer{none}},
		}},
	})
}
