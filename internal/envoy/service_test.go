package envoy_test

import (
	"math"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The examples of envoyproxy/ratelimit's README (its "Examples" section),
// served by one allocator.
const examples = `
envoy:
  domains:
    - domain: messaging           # example 2: nested descriptors
      descriptors:
        - key: message_type
          value: marketing
          descriptors:
            - key: to_number
              rate_limit: { unit: day, requests_per_unit: 5 }
        - key: to_number
          rate_limit: { unit: day, requests_per_unit: 100 }
    - domain: edge_proxy_per_ip   # example 3: a value-specific override
      descriptors:
        - key: remote_address
          rate_limit: { unit: second, requests_per_unit: 10 }
        - key: remote_address
          value: 50.0.0.5
          rate_limit: { unit: second, requests_per_unit: 0 }
    - domain: example4            # example 4: the request's depth must match
      descriptors:
        - key: key
          value: value
          rate_limit: { requests_per_unit: 300, unit: second }
    - domain: internal            # example 5: unlimited
      algorithm: token_bucket
      descriptors:
        - key: ldap
          rate_limit: { unlimited: true }
        - key: azure
          rate_limit: { unit: minute, requests_per_unit: 100 }
    - domain: example6            # example 6: shadow mode
      descriptors:
        - key: service
          descriptors:
            - key: user
              value: user-a
              rate_limit: { requests_per_unit: 10, unit: second }
              shadow_mode: true
            - key: user
              value: user-b
              rate_limit: { requests_per_unit: 20, unit: second }
    - domain: example7            # example 7: replaces
      descriptors:
        - key: key_1
          value: value_1
          descriptors:
            - key: user
              value: bkthomps
              rate_limit: { name: specific_limit, requests_per_unit: 5, unit: second }
        - key: key_2
          value: value_2
          descriptors:
            - key: user
              value: bkthomps
              rate_limit:
                replaces: [ { name: specific_limit } ]
                requests_per_unit: 10
                unit: second
    - domain: example9            # example 9: a value prefix
      descriptors:
        - key: key1
          value: value*
          rate_limit: { unit: minute, requests_per_unit: 20 }
`

// Example 2: (marketing, number) gets 5 a day and any number 100 a day,
// in one request. A request the first refuses costs nothing on the second
// (envoyproxy/ratelimit would have charged it); each number counts alone.
func TestNestedDescriptorsSpendAllOrNone(t *testing.T) {
	r := start(t, examples)
	marketing := desc("message_type=marketing", "to_number=2061111111")
	number := desc("to_number=2061111111")
	for i := range 5 {
		resp := r.ask(t, "messaging", 0, marketing, number)
		expect(t, "request within both limits", resp, ok, status{ok, 5, uint32(4 - i)}, status{ok, 100, uint32(99 - i)})
	}
	if d := r.ask(t, "messaging", 0, marketing, number).GetStatuses()[0].GetDurationUntilReset().AsDuration(); d != 24*time.Hour-10*time.Second {
		t.Fatalf("duration_until_reset %v, want the day's window to end in 23h59m50s", d)
	}
	for range 5 {
		resp := r.ask(t, "messaging", 0, marketing, number)
		expect(t, "marketing spent", resp, over, status{over, 5, 0}, status{ok, 100, 95})
	}
	expect(t, "the number alone", r.ask(t, "messaging", 0, number), ok, status{ok, 100, 94})
	expect(t, "another number", r.ask(t, "messaging", 0, desc("message_type=marketing", "to_number=2062222222")), ok, status{ok, 5, 4})
	// The next day's window starts afresh.
	r.clk.Advance(24 * time.Hour)
	expect(t, "next day", r.ask(t, "messaging", 0, marketing, number), ok, status{ok, 5, 4}, status{ok, 100, 99})
}

// Example 3: the most specific match wins: one address refused outright
// (requests_per_unit 0), every other one 10 a second, counted apart.
func TestValueSpecificOverride(t *testing.T) {
	r := start(t, examples)
	banned := desc("remote_address=50.0.0.5")
	for range 3 {
		expect(t, "banned address", r.ask(t, "edge_proxy_per_ip", 0, banned), over, status{over, 0, 0})
	}
	addr := desc("remote_address=50.0.0.1")
	for i := range 10 {
		expect(t, "address", r.ask(t, "edge_proxy_per_ip", 0, addr), ok, status{ok, 10, uint32(9 - i)})
	}
	resp := r.ask(t, "edge_proxy_per_ip", 0, addr)
	expect(t, "11th in the second", resp, over, status{over, 10, 0})
	if d := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); d != time.Second {
		t.Fatalf("duration_until_reset %v, want 1s", d)
	}
	expect(t, "another address", r.ask(t, "edge_proxy_per_ip", 0, desc("remote_address=50.0.0.2")), ok, status{ok, 10, 9})
	r.clk.Advance(time.Second)
	expect(t, "next second", r.ask(t, "edge_proxy_per_ip", 0, addr), ok, status{ok, 10, 9})
}

// Examples 4 and 5: a descriptor deeper than the config matches nothing;
// an unlimited one answers OK with limit_remaining 2^32-1 and no limit;
// an unknown domain limits nothing; a token bucket refills.
func TestUnlimitedUnmatchedAndUnknown(t *testing.T) {
	r := start(t, examples)
	resp := r.ask(t, "example4", 0, desc("key=value", "subkey=subvalue"), desc("key=value"))
	expect(t, "depth", resp, ok, status{ok, 0, 0}, status{ok, 300, 299})
	if resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatal("a descriptor that matches no limit has no current_limit")
	}
	for range 3 {
		resp := r.ask(t, "internal", 0, desc("ldap=cn"))
		expect(t, "unlimited", resp, ok, status{ok, 0, math.MaxUint32})
	}
	expect(t, "unknown domain", r.ask(t, "nope", 0, desc("ldap=cn"), desc("azure=x")), ok, status{ok, 0, 0}, status{ok, 0, 0})
	azure := desc("azure=sub")
	for i := range 100 {
		expect(t, "azure", r.ask(t, "internal", 0, azure), ok, status{ok, 100, uint32(99 - i)})
	}
	expect(t, "azure spent", r.ask(t, "internal", 0, azure), over, status{over, 100, 0})
	r.clk.Advance(600 * time.Millisecond) // 100 a minute: one token
	expect(t, "azure refilled", r.ask(t, "internal", 0, azure), ok, status{ok, 100, 0})
}

// Example 6: a limit in shadow mode is decided and counted but never
// refuses, and never stops the request's other limits from being spent.
func TestShadowModeCountsButNeverRefuses(t *testing.T) {
	r := start(t, examples)
	userA := desc("service=auth", "user=user-a")
	for i := range 15 {
		want := status{ok, 10, uint32(max(9-i, 0))}
		expect(t, "shadow user", r.ask(t, "example6", 0, userA), ok, want)
	}
	if n := metric(t, r.a.Registry(), "allot_envoy_shadow_over_limit_total", map[string]string{"domain": "example6"}); n != 5 {
		t.Fatalf("shadow would-be refusals %v, want 5", n)
	}
	userB := desc("service=auth", "user=user-b")
	for i := range 20 {
		expect(t, "shadow beside an enforced limit", r.ask(t, "example6", 0, userA, userB), ok,
			status{ok, 10, 0}, status{ok, 20, uint32(19 - i)})
	}
	expect(t, "enforced limit spent", r.ask(t, "example6", 0, userA, userB), over, status{ok, 10, 0}, status{over, 20, 0})
	if n := metric(t, r.a.Registry(), "allot_envoy_shadow_over_limit_total", nil); n != 26 {
		t.Fatalf("shadow would-be refusals %v, want 26", n)
	}
}

// Example 7: when both limits match, the replacing one applies and the
// replaced one is neither checked nor charged.
func TestReplaces(t *testing.T) {
	r := start(t, examples)
	first := desc("key_1=value_1", "user=bkthomps")
	second := desc("key_2=value_2", "user=bkthomps")
	for i := range 10 {
		expect(t, "both", r.ask(t, "example7", 0, first, second), ok, status{ok, 0, 0}, status{ok, 10, uint32(9 - i)})
	}
	expect(t, "both, spent", r.ask(t, "example7", 0, first, second), over, status{ok, 0, 0}, status{over, 10, 0})
	for i := range 5 {
		expect(t, "the replaced limit alone", r.ask(t, "example7", 0, first), ok, status{ok, 5, uint32(4 - i)})
	}
	if n := metric(t, r.a.Registry(), "allot_envoy_descriptors_total", map[string]string{"result": "replaced"}); n != 11 {
		t.Fatalf("replaced descriptors %v, want 11", n)
	}
}

// Example 9: a value ending in '*' matches every value it begins.
func TestValuePrefix(t *testing.T) {
	r := start(t, examples)
	expect(t, "value_1", r.ask(t, "example9", 0, desc("key1=value_1")), ok, status{ok, 20, 19})
	expect(t, "value_2 counts apart", r.ask(t, "example9", 0, desc("key1=value_2")), ok, status{ok, 20, 19})
	expect(t, "no prefix", r.ask(t, "example9", 0, desc("key1=valu")), ok, status{ok, 0, 0})
}

// hits_addend: the request's, a descriptor's own over it, 0 asks without
// counting, and hits above what is left (or above the limit) are refused
// without being charged.
func TestHitsAddend(t *testing.T) {
	r := start(t, examples)
	number := desc("to_number=1")
	expect(t, "30 hits", r.ask(t, "messaging", 30, number), ok, status{ok, 100, 70})
	own := desc("to_number=1")
	own.HitsAddend = wrapperspb.UInt64(50)
	expect(t, "descriptor's 50 over the request's 3", r.ask(t, "messaging", 3, own), ok, status{ok, 100, 20})
	query := desc("to_number=1")
	query.HitsAddend = wrapperspb.UInt64(0)
	expect(t, "0 hits", r.ask(t, "messaging", 0, query), ok, status{ok, 100, 20})
	expect(t, "21 hits, 20 left", r.ask(t, "messaging", 21, number), over, status{over, 100, 20})
	expect(t, "1000 hits, above the limit", r.ask(t, "messaging", 1000, number), over, status{over, 100, 0})
	expect(t, "nothing was charged", r.ask(t, "messaging", 20, number), ok, status{ok, 100, 0})
}

// A descriptor's limit override applies per descriptor values, for a
// configured domain, in its unit; in an unknown domain nothing applies.
func TestLimitOverride(t *testing.T) {
	r := start(t, examples)
	d := desc("client=abc")
	d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_MINUTE}
	expect(t, "override 1", r.ask(t, "messaging", 0, d), ok, status{ok, 2, 1})
	expect(t, "override 2", r.ask(t, "messaging", 0, d), ok, status{ok, 2, 0})
	resp := r.ask(t, "messaging", 0, d)
	expect(t, "override spent", resp, over, status{over, 2, 0})
	if l := resp.GetStatuses()[0].GetCurrentLimit(); l.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("current_limit %v, want the override's unit", l)
	}
	expect(t, "unknown domain", r.ask(t, "nope", 0, d), ok, status{ok, 0, 0})
}

// Bad requests are InvalidArgument naming the field, with a BadRequest
// detail; nothing is half-done.
func TestBadRequestsNameTheField(t *testing.T) {
	r := start(t, examples)
	emptyKey := desc("a=1", "=2")
	negative := desc("to_number=1")
	negative.IsNegativeHits = true
	badUnit := desc("to_number=1")
	badUnit.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	badMult := desc("to_number=1")
	badMult.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(2)}
	many := make([]*ratelimitpb.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = desc("to_number=1")
	}
	cases := []struct {
		name   string
		domain string
		ds     []*ratelimitpb.RateLimitDescriptor
		field  string
	}{
		{"no domain", "", []*ratelimitpb.RateLimitDescriptor{desc("a=1")}, "domain"},
		{"no descriptors", "messaging", nil, "descriptors"},
		{"too many descriptors", "messaging", many, "descriptors"},
		{"no entries", "messaging", []*ratelimitpb.RateLimitDescriptor{desc("a=1"), {}}, "descriptors[1].entries"},
		{"empty key", "messaging", []*ratelimitpb.RateLimitDescriptor{emptyKey}, "descriptors[0].entries[1].key"},
		{"long value", "messaging", []*ratelimitpb.RateLimitDescriptor{desc("a=" + strings.Repeat("v", 2000))}, "descriptors[0].entries[0].value"},
		{"negative hits", "messaging", []*ratelimitpb.RateLimitDescriptor{negative}, "descriptors[0].is_negative_hits"},
		{"override without a unit", "messaging", []*ratelimitpb.RateLimitDescriptor{badUnit}, "descriptors[0].limit.unit"},
		{"override too long", "messaging", []*ratelimitpb.RateLimitDescriptor{badMult}, "descriptors[0].limit.unit_multiplier"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.call(c.domain, 0, c.ds...)
			st := grpcstatus.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), c.field+": ") {
				t.Fatalf("error %v, want InvalidArgument naming %s", err, c.field)
			}
			var field string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
					field = br.GetFieldViolations()[0].GetField()
				}
			}
			if field != c.field {
				t.Fatalf("BadRequest field %q, want %q", field, c.field)
			}
		})
	}
	expect(t, "nothing was charged", r.ask(t, "messaging", 0, desc("to_number=1")), ok, status{ok, 100, 99})
}
