package rules

import (
	"strings"
	"testing"
	"time"
)

func TestConcurrencyDefaults(t *testing.T) {
	s, err := Parse("c.yaml", []byte("rules:\n  - name: c\n    algorithm: concurrency\n    limit: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.Get("c")
	want := LeaseTuning{Min: 1, Max: 20, TTL: 2 * time.Second, Refresh: 200 * time.Millisecond}
	if !r.IsConcurrency() || r.Leasable() || r.Strict || r.Failure != FailOpen || r.Lease != want ||
		r.MaxHold != time.Second || r.Period != 0 || r.Capacity() != 20 {
		t.Fatalf("defaults = %+v, want open, not token-leasable, lease %+v, max_hold 1s, no period", *r, want)
	}
	back, err := FromProto(s.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := back.Get("c"); b.MaxHold != r.MaxHold || !b.IsConcurrency() || back.Version() != s.Version() {
		t.Fatalf("through the wire: %+v, version %s want %s", *b, back.Version(), s.Version())
	}
}

func TestConcurrencyRefusals(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{"period: 1s", `c.yaml:4: rule "c": field period: a concurrency rule counts requests in flight`},
		{"period: day", `field period: a concurrency rule counts requests in flight`},
		{"burst: 30", `field burst: a concurrency rule`},
		{"max_debt: 3", `field max_debt: a concurrency rule`},
		{"strict: true", `field strict: a concurrency rule`},
		{"shadow: true", `field shadow: is not supported on concurrency rules`},
		{"overrides: [{key: a, limit: 3}]", `field overrides: are not supported`},
		{"max_hold: 2s", `field max_hold: must be positive and below lease.ttl (2s), got 2s`},
		{"max_hold: 0s", `field max_hold: must be positive, got 0s`},
		{"lease: {ttl: 1s, refresh: 300ms}", `field lease.refresh: must be between 1ms and half of lease.ttl less max_hold (250ms), got 300ms`},
		{"lease: {max: 21}", `field lease.max: must be between lease.min (1) and the limit 20, got 21`},
		{"limit: 0", `field limit: must be between 1`},
	} {
		doc := "rules:\n  - name: c\n    algorithm: concurrency\n    " + c.extra + "\n"
		if !strings.HasPrefix(c.extra, "limit") {
			doc += "    limit: 20\n"
		}
		_, err := Parse("c.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.extra, err, c.want)
		}
	}
	_, err := Parse("t.yaml", []byte("rules:\n  - name: t\n    algorithm: token_bucket\n    limit: 5\n    period: 1s\n    max_hold: 1s\n"))
	if err == nil || !strings.Contains(err.Error(), `rule "t": field max_hold: is for concurrency rules`) {
		t.Errorf("max_hold on a token bucket: %v", err)
	}
}

func TestConcurrencyRefusesRuntimeOverrides(t *testing.T) {
	s, err := Parse("c.yaml", []byte("rules:\n  - name: c\n    algorithm: concurrency\n    limit: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.Get("c")
	if err := r.CheckRuntime(&RuntimeOverride{Rule: "c", Key: "k", Limit: 40}); err == nil || !strings.Contains(err.Error(), "take no overrides") {
		t.Fatalf("a runtime override of a concurrency rule: %v", err)
	}
	out, errs := s.WithRuntime([]RuntimeOverride{{Rule: "c", Key: "k", Limit: 40}}, time.Now())
	if len(errs) != 1 || out != s {
		t.Fatalf("WithRuntime: %v, set changed %t", errs, out != s)
	}
}
