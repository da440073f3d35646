package envoy_test

import (
	"testing"
	"time"
)

// The README's docker-compose demo and the scripts of
// integration-test/scripts, against examples/ratelimit/config (domain rl,
// as examples/envoy/proxy.yaml's filter names it). Each script's curl is
// the descriptors Envoy sends for its route: /test (source_cluster,
// destination_cluster), /header (foo), /twoheader (foo, bar) or (foo, baz),
// /fourheader (foo, bar) and the clusters, /fiveheader those and
// (category), /unspec (unspec), /quota (service) twice in domain quota.
// A script's "assert_ok" is overall OK, "assert_limited" OVER_LIMIT.
func TestUpstreamExampleScripts(t *testing.T) {
	mock := d("source_cluster=proxy", "destination_cluster=mock")
	banned := d("foo=bkthomps", "bar=banned")
	cluster := func(dst string) []string { return d("source_cluster=proxy", "destination_cluster="+dst) }
	myFoo := d("foo=my_foo", "bar=bkthomps")
	account := d("category=account")
	foo3 := d("foo=foo_3", "bar=bar_3")
	runUpstream(t, []upstreamCase{
		{"README demo: /test, 1 a minute", "examples", "rl", []step{
			{ds: ds(mock), overall: ok, want: []answer{lim(ok, 1, 0, 50)}},
			{ds: ds(mock), overall: over, want: []answer{lim(over, 1, 0, 50)}},
		}},
		{"README demo: /header foo, 2 a minute", "examples", "rl", []step{
			{n: 2, ds: one("foo=foo"), overall: ok, want: []answer{lim(ok, 2, 1, 50).spends()}},
			{ds: one("foo=foo"), overall: over, want: []answer{lim(over, 2, 0, 50)}},
		}},
		{"README demo: /twoheader foo bar, 3 a minute", "examples", "rl", []step{
			{n: 3, ds: one("foo=foo", "bar=bar"), overall: ok, want: []answer{lim(ok, 3, 2, 50).spends()}},
			{ds: one("foo=foo", "bar=bar"), overall: over, want: []answer{lim(over, 3, 0, 50)}},
		}},
		{"README demo: /twoheader foo baz, will be rate limited", "examples", "rl", []step{
			{ds: one("foo=foo", "baz=baz"), overall: ok, want: []answer{lim(ok, 1, 0, 1)}},
			{ds: one("foo=foo", "baz=baz"), overall: over, want: []answer{lim(over, 1, 0, 1)}},
			{wait: time.Second, ds: one("foo=foo", "baz=baz"), overall: ok, want: []answer{lim(ok, 1, 0, 1)}},
		}},
		{"README demo: /twoheader bar banned", "examples", "rl", []step{
			{ds: one("foo=foo", "bar=banned"), overall: over, want: []answer{lim(over, 0, 0, 50)}},
		}},
		{"README demo: bay and qux unlimited", "examples", "rl", []step{
			{n: 5, ds: ds(d("foo=foo", "bay=x"), d("qux=y")), overall: ok, want: []answer{unlimited, unlimited}},
		}},
		{"simple-get.sh: foo, baz shady", "examples", "rl", []step{
			{ds: one("foo=test", "baz=shady"), overall: ok, want: []answer{lim(ok, 3, 2, 50)}},
		}},
		{"trigger-shadow-mode-key.sh: baz shady is never limited", "examples", "rl", []step{
			{n: 3, ds: one("foo=pelle", "baz=shady"), overall: ok, want: []answer{lim(ok, 3, 2, 50).spends()}},
			{n: 3, ds: one("foo=pelle", "baz=shady"), overall: ok, want: []answer{lim(ok, 3, 0, 50)}},
		}},
		{"trigger-ratelimit.sh: baz not-so-shady, 3 a minute", "examples", "rl", []step{
			{n: 3, ds: one("foo=pelle", "baz=not-so-shady"), overall: ok, want: []answer{lim(ok, 3, 2, 50).spends()}},
			{n: 2, ds: one("foo=pelle", "baz=not-so-shady"), overall: over, want: []answer{lim(over, 3, 0, 50)}},
		}},
		{"value-included-in-stats-key-when-unspecified.sh: unspec, 2 a minute", "examples", "rl", []step{
			{n: 2, ds: one("unspec=unspecified_value"), overall: ok, want: []answer{lim(ok, 2, 1, 50).spends()}},
			{ds: one("unspec=unspecified_value"), overall: over, want: []answer{lim(over, 2, 0, 50)}},
		}},
		// The refusals below leave the limits that did not refuse unspent
		// (docs/envoy.md, "Charging refused hits"): the mock cluster's 1
		// is still there after the banned request, and (foo_3, bar_3) has
		// 1 left after the fake cluster refused; envoyproxy/ratelimit
		// charges both, which changes no overall answer of the script.
		{"replaces.sh", "examples", "rl", []step{
			// replaces raises a limit: banned_limit (0) replaced by override (2)
			{ds: ds(banned), overall: over, want: []answer{lim(over, 0, 0, 50)}},
			{ds: ds(banned, mock), overall: over, want: []answer{lim(over, 0, 0, 50), lim(ok, 1, 1, 50)}},
			{n: 2, ds: ds(banned, cluster("override")), overall: ok, want: []answer{none, lim(ok, 2, 1, 50).spends()}},
			{ds: ds(banned, cluster("override")), overall: over, want: []answer{none, lim(over, 2, 0, 50)}},
			// and leaves the replaced limit (bkthomps, 1) as it was
			{n: 2, ds: ds(myFoo, cluster("bkthomps")), overall: ok, want: []answer{none, lim(ok, 2, 1, 50).spends()}},
			{ds: ds(myFoo, cluster("bkthomps")), overall: over, want: []answer{none, lim(over, 2, 0, 50)}},
			{ds: ds(myFoo, cluster("not_bkthomps")), overall: ok, want: []answer{lim(ok, 1, 0, 50), none}},
			{ds: ds(myFoo, cluster("not_bkthomps")), overall: over, want: []answer{lim(over, 1, 0, 50), none}},
			{ds: ds(myFoo, cluster("bkthomps")), overall: over, want: []answer{none, lim(over, 2, 0, 50)}},
			// one limit replaces two: category (4) over bkthomps and fake_name
			{n: 4, ds: ds(myFoo, cluster("fake"), account), overall: ok, want: []answer{none, none, lim(ok, 4, 3, 50).spends()}},
			{ds: ds(myFoo, cluster("fake"), account), overall: over, want: []answer{none, none, lim(over, 4, 0, 50)}},
			{ds: one("foo=foo_2", "bar=bkthomps"), overall: ok, want: []answer{lim(ok, 1, 0, 50)}},
			{ds: one("foo=foo_2", "bar=bkthomps"), overall: over, want: []answer{lim(over, 1, 0, 50)}},
			{n: 2, ds: ds(foo3, cluster("fake")), overall: ok, want: []answer{lim(ok, 3, 2, 50).spends(), lim(ok, 2, 1, 50).spends()}},
			{ds: ds(foo3, cluster("fake")), overall: over, want: []answer{lim(ok, 3, 1, 50), lim(over, 2, 0, 50)}},
			{ds: ds(myFoo, cluster("fake"), account), overall: over, want: []answer{none, none, lim(over, 4, 0, 50)}},
		}},
		// quota_mode: each exceeded quota says OVER_LIMIT in its status and
		// the request passes until every quota it matched is exceeded
		// ("Quota is debited from all matching buckets and 3rd request
		// should be rejected"); a new minute refreshes the buckets.
		{"quota.sh: two quotas, the third request refused", "examples", "quota", []step{
			{ds: ds(d("service=service_1"), d("service=service_2")), overall: ok,
				want: []answer{lim(ok, 1, 0, 50), lim(ok, 2, 1, 50)}},
			{ds: ds(d("service=service_1"), d("service=service_2")), overall: ok,
				want: []answer{lim(over, 1, 0, 50), lim(ok, 2, 0, 50)}},
			{ds: ds(d("service=service_1"), d("service=service_2")), overall: over,
				want: []answer{lim(over, 1, 0, 50), lim(over, 2, 0, 50)}},
			{wait: time.Minute, ds: ds(d("service=service_1"), d("service=service_2")), overall: ok,
				want: []answer{lim(ok, 1, 0, 50), lim(ok, 2, 1, 50)}},
		}},
		{"config.yaml: mongo_cps, 5 a minute", "examples", "mongo_cps", []step{
			{n: 5, ds: one("database=users"), overall: ok, want: []answer{lim(ok, 5, 4, 50).spends()}},
			{ds: one("database=users"), overall: over, want: []answer{lim(over, 5, 0, 50)}},
			{ds: one("database=default"), overall: ok, want: []answer{lim(ok, 5, 4, 50)}},
		}},
	})
}
