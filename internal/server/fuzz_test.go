package server

import (
	"context"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// fuzzRules span what a rule may be: the smallest and largest limits,
// periods and rates, a burst and a lease.max below the limit, every
// algorithm, and two rules that are decided by Check only.
const fuzzRules = `
rules:
  - { name: tb, algorithm: token_bucket, limit: 100, period: 24h }
  - { name: tiny, algorithm: token_bucket, limit: 1, period: 8784h }
  - { name: huge, algorithm: token_bucket, limit: 1099511627776, period: 8784h }
  - { name: fast, algorithm: token_bucket, limit: 1000, period: 1ms }
  - { name: capped, algorithm: token_bucket, limit: 1000, period: 1s, burst: 10, lease: { max: 5, ttl: 1h } }
  - { name: fw, algorithm: fixed_window, limit: 100, period: 1s }
  - { name: fwhuge, algorithm: fixed_window, limit: 1099511627776, period: 1ms }
  - { name: sw, algorithm: sliding_window, limit: 7, period: 1m }
  - { name: log, algorithm: sliding_log, limit: 5, period: 1h }
  - { name: strict, algorithm: token_bucket, limit: 10, period: 1s, strict: true }
`

// fuzzStart is the fake clock's epoch; each input adds its own offset.
var fuzzStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzServer is a Server on a fresh memory store whose clock moves only
// when the input says so. The store is closed with the test.
func fuzzServer(t *testing.T, set *rules.Set, offset time.Duration) (*Server, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(fuzzStart.Add(offset))
	st := store.NewMemory(clk)
	t.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st, Rules: set, Logger: slog.New(slog.DiscardHandler), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return srv, clk
}

func fuzzRuleSet(f *testing.F) *rules.Set {
	set, err := rules.Parse("fuzz", []byte(fuzzRules))
	if err != nil {
		f.Fatal(err)
	}
	return set
}

// rpcs are the methods, by the index the fuzzers pick them with.
var rpcs = []string{"Acquire", "Release", "Check", "GetRules"}

// FuzzRPCBytes decodes arbitrary bytes as a request of one RPC the way the
// allocator's codec does (DecodeOptions), then serves it. A request that
// does not decode is InvalidArgument naming "request"; any other answer
// passes checkAnswer.
func FuzzRPCBytes(f *testing.F) {
	set := fuzzRuleSet(f)
	for _, seed := range rpcSeeds() {
		f.Add(seed.method, seed.body)
	}
	f.Fuzz(func(t *testing.T, method uint8, body []byte) {
		srv, _ := fuzzServer(t, set, 0)
		req := newRequest(method)
		codec := decodeCodec{encoding.GetCodecV2("proto")}
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, req); err != nil {
			t.Fatalf("the codec failed instead of marking the request: %v", err)
		}
		if err := undecoded(req); err != nil {
			if proto.Unmarshal(body, newRequest(method)) == nil {
				t.Fatalf("a request that decodes was refused: %v", err)
			}
			checkError(t, err)
			if !strings.HasPrefix(status.Convert(err).Message(), "request: ") {
				t.Fatalf("an undecodable request: %v, want it to name the request", err)
			}
			return
		}
		resp, err := call(srv, req)
		checkAnswer(t, set, req, resp, err)
	})
}

func newRequest(method uint8) proto.Message {
	switch rpcs[int(method)%len(rpcs)] {
	case "Acquire":
		return &allotv1.AcquireRequest{}
	case "Release":
		return &allotv1.ReleaseRequest{}
	case "Check":
		return &allotv1.CheckRequest{}
	}
	return &allotv1.GetRulesRequest{}
}

func call(srv *Server, req proto.Message) (proto.Message, error) {
	ctx := context.Background()
	switch req := req.(type) {
	case *allotv1.AcquireRequest:
		return srv.Acquire(ctx, req)
	case *allotv1.ReleaseRequest:
		return srv.Release(ctx, req)
	case *allotv1.CheckRequest:
		return srv.Check(ctx, req)
	case *allotv1.GetRulesRequest:
		return srv.GetRules(ctx, req)
	}
	panic("no such request")
}

type rpcSeed struct {
	method uint8
	body   []byte
}

func rpcSeeds() []rpcSeed {
	var seeds []rpcSeed
	add := func(method uint8, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		seeds = append(seeds, rpcSeed{method, b})
	}
	add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{
		{Rule: "tb", Key: "a", Want: 40}, {Rule: "fw", Key: "a", Want: 500, Consumed: 10},
		{Rule: "sw", Key: "b", Want: 3, WantRate: 1, ConsumedAge: durationpb.New(time.Second), Returned: 2, ReturnedEpoch: 1},
	}})
	add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{
		{Rule: "huge", Key: "k", Want: rules.MaxLimit, Consumed: rules.MaxLimit, Returned: rules.MaxLimit, WantRate: 1e300},
		{Rule: "fast", Key: "k", Want: 1 << 62, ConsumedAge: &durationpb.Duration{Seconds: 315_576_000_000}},
		{Rule: "log", Key: "k", Want: 1},
	}})
	add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k"}, {Rule: "tb", Key: "k"}}})
	add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", WantRate: math.NaN()}}})
	add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Demand: math.Inf(-1)}}})
	add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", ConsumedAge: &durationpb.Duration{Seconds: 1, Nanos: -1}}}})
	add(0, &allotv1.AcquireRequest{NodeId: strings.Repeat("n", 129), Requests: []*allotv1.LeaseRequest{{Rule: "no pe", Key: "k"}}})
	add(1, &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "tb", Key: "a", Tokens: 40}, {Rule: "fw", Key: "a", Tokens: 3, Epoch: 7}}})
	add(1, &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "strict", Key: "a", Tokens: -1}}})
	add(2, &allotv1.CheckRequest{Rule: "tb", Key: "a", Cost: 100})
	add(2, &allotv1.CheckRequest{Rule: "log", Key: "a"})
	add(2, &allotv1.CheckRequest{Rule: "capped", Key: "a", Cost: 11})
	add(2, &allotv1.CheckRequest{Rule: "nope", Key: strings.Repeat("k", 513), Cost: -1})
	add(3, &allotv1.GetRulesRequest{})
	// Each limit, and one past it.
	for _, n := range []int{0, 1} {
		add(0, &allotv1.AcquireRequest{NodeId: strings.Repeat("n", 128+n), Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: "k", Want: 1}}})
		add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "tb", Key: strings.Repeat("é", 256) + strings.Repeat("k", n), Want: 1}}})
		add(0, &allotv1.AcquireRequest{NodeId: "n", Requests: []*allotv1.LeaseRequest{{Rule: "huge", Key: "k", Want: rules.MaxLimit + int64(n)}}})
		add(1, &allotv1.ReleaseRequest{NodeId: "n", Returns: []*allotv1.Return{{Rule: "huge", Key: "k", Tokens: rules.MaxLimit + int64(n)}}})
		add(2, &allotv1.CheckRequest{Rule: "capped", Key: strings.Repeat("k", 512+n), Cost: 10 + int64(n)})
		batch := &allotv1.AcquireRequest{NodeId: "n"}
		for i := range 1000 + n {
			batch.Requests = append(batch.Requests, &allotv1.LeaseRequest{Rule: "fw", Key: strconv.Itoa(i), Want: 1})
		}
		add(0, batch)
	}
	// What the protobuf library will not write: malformed bytes, strings
	// that are not UTF-8, unknown fields, a field of the wrong wire type.
	seeds = append(seeds,
		rpcSeed{0, []byte{0x0a, 0xff, 0xff}},
		rpcSeed{0, rawLeaseRequest("n", "tb", "bad\xff\xfekey")},
		rpcSeed{0, rawLeaseRequest("n\xff", "tb", "k")},
		rpcSeed{2, []byte("\x0a\x02tb\x12\x02\xff\xfe")},
		rpcSeed{2, []byte("\x0a\x02tb\x12\x01k\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")},
		rpcSeed{2, []byte("\x0a\x02tb\x12\x01k\xf8\xff\xff\xff\x0f\x00")},
		rpcSeed{3, []byte("\x08\x01")},
		rpcSeed{1, []byte("\x0a\x01n\x12\x05\x08\x01\x12\x01k")},
		rpcSeed{0, nil},
	)
	return seeds
}

// rawLeaseRequest is an AcquireRequest of one LeaseRequest, written by
// hand: the protobuf library will not encode a string that is not UTF-8.
func rawLeaseRequest(node, rule, key string) []byte {
	var lr []byte
	lr = protowire.AppendTag(lr, 1, protowire.BytesType)
	lr = protowire.AppendString(lr, rule)
	lr = protowire.AppendTag(lr, 2, protowire.BytesType)
	lr = protowire.AppendString(lr, key)
	lr = protowire.AppendTag(lr, 3, protowire.VarintType)
	lr = protowire.AppendVarint(lr, 1)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, node)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, lr)
}

// FuzzRPCFields builds requests from fuzzed fields and plays one node's
// round on a fresh store: Acquire, Check, Release, GetRules, then the clock
// moves and Acquire again. Every answer passes checkAnswer, and before the
// clock moves no (rule, key) gives out more than its capacity.
func FuzzRPCFields(f *testing.F) {
	set := fuzzRuleSet(f)
	f.Add("n", "tb", "a", int64(40), int64(0), int64(0), int64(0), 0.0, int64(0), int32(0), int64(1), uint8(2), int64(0), int64(time.Second))
	f.Add("n", "capped", "a", int64(100), int64(3), int64(2), int64(0), 5.0, int64(1), int32(5), int64(10), uint8(1), int64(123), int64(time.Hour))
	f.Add("node-1", "fw", "k", int64(500), int64(10), int64(1), int64(1), 1.5, int64(2), int32(0), int64(100), uint8(3), int64(999_999), int64(time.Millisecond))
	f.Add("n", "sw", "k", int64(7), int64(6), int64(7), int64(-1), 0.1, int64(60), int32(1), int64(7), uint8(0), int64(59_999_999), int64(30*time.Second))
	f.Add("n", "huge", "k", rules.MaxLimit, rules.MaxLimit, rules.MaxLimit, int64(math.MaxInt64), math.MaxFloat64, int64(315_576_000_000), int32(999_999_999), rules.MaxLimit, uint8(4), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add("n", "fast", "k", int64(1), int64(0), int64(0), int64(0), 1e6, int64(0), int32(0), int64(1000), uint8(1), int64(0), int64(-1))
	f.Add("n", "log", "k", int64(1), int64(0), int64(0), int64(0), 0.0, int64(0), int32(0), int64(5), uint8(1), int64(0), int64(time.Hour))
	f.Add("", "", "", int64(-1), int64(-1), int64(-1), int64(0), math.Inf(1), int64(-1), int32(-1), int64(-1), uint8(0), int64(0), int64(0))
	f.Add(strings.Repeat("n", 129), "tb", strings.Repeat("k", 512), int64(1), int64(0), int64(0), int64(0), 0.0, int64(0), int32(0), int64(1), uint8(1), int64(0), int64(0))
	f.Add(strings.Repeat("n", 128), "tb", strings.Repeat("k", 513), int64(1), int64(0), int64(0), int64(0), 0.0, int64(0), int32(0), int64(1), uint8(1), int64(0), int64(0))
	f.Add("n", "tb", "\xff", int64(1), int64(0), int64(0), int64(0), math.NaN(), int64(1), int32(-1), int64(0), uint8(1), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, node, rule, key string, want, consumed, returned, epoch int64, wantRate float64,
		ageSeconds int64, ageNanos int32, cost int64, entries uint8, startUS, advance int64) {
		// Strings on the wire are UTF-8, or the codec refuses them
		// (FuzzRPCBytes covers that); keep the length the fuzzer chose.
		node, rule, key = strings.ToValidUTF8(node, "\ufffd"), strings.ToValidUTF8(rule, "\ufffd"), strings.ToValidUTF8(key, "\ufffd")
		offset := time.Duration(uint64(startUS)%uint64(400*24*time.Hour/time.Microsecond)) * time.Microsecond
		srv, clk := fuzzServer(t, set, offset)
		names := ruleNames(set)
		acquire := &allotv1.AcquireRequest{NodeId: node}
		var age *durationpb.Duration
		if ageSeconds != 0 || ageNanos != 0 {
			age = &durationpb.Duration{Seconds: ageSeconds, Nanos: ageNanos}
		}
		for i := range int(entries % 5) {
			lr := &allotv1.LeaseRequest{Rule: rule, Key: key, Want: want, Consumed: consumed, ConsumedAge: age,
				WantRate: wantRate, Returned: returned, ReturnedEpoch: epoch, Held: &returned}
			if i > 0 { // the others: the same key under other rules, then another key
				lr.Rule = names[(int(entries)+i)%len(names)]
				if i%2 == 0 {
					lr.Key = key + "/2"
				}
			}
			acquire.Requests = append(acquire.Requests, lr)
		}
		given := make(map[[2]string]int64)
		resp, err := call(srv, acquire)
		checkAnswer(t, set, acquire, resp, err)
		if err == nil {
			for _, l := range resp.(*allotv1.AcquireResponse).GetLeases() {
				given[[2]string{l.GetRule(), l.GetKey()}] += l.GetGranted()
			}
		}
		check := &allotv1.CheckRequest{Rule: rule, Key: key, Cost: cost}
		resp, err = call(srv, check)
		checkAnswer(t, set, check, resp, err)
		if err == nil && resp.(*allotv1.CheckResponse).GetAllowed() {
			given[[2]string{rule, key}] += max(cost, 1)
		}
		for rk, n := range given {
			if r, _ := set.Get(rk[0]); n > r.Capacity() {
				t.Fatalf("rule %q key %q: %d tokens given out with the clock still, capacity %d", rk[0], rk[1], n, r.Capacity())
			}
		}
		release := &allotv1.ReleaseRequest{NodeId: node}
		for _, lr := range acquire.GetRequests() {
			release.Returns = append(release.Returns, &allotv1.Return{Rule: lr.GetRule(), Key: lr.GetKey(), Tokens: returned, Epoch: epoch, Held: &returned})
		}
		resp, err = call(srv, release)
		checkAnswer(t, set, release, resp, err)
		resp, err = call(srv, &allotv1.GetRulesRequest{})
		checkAnswer(t, set, &allotv1.GetRulesRequest{}, resp, err)
		if advance > 0 {
			clk.Advance(time.Duration(advance))
		}
		resp, err = call(srv, acquire)
		checkAnswer(t, set, acquire, resp, err)
	})
}

func ruleNames(set *rules.Set) []string {
	var names []string
	for _, r := range set.Rules() {
		names = append(names, r.Name)
	}
	return names
}

// checkAnswer: an error is a status a client could act on (checkError);
// an accepted request was valid (checkValid), and its answer is sound.
func checkAnswer(t *testing.T, set *rules.Set, req, resp proto.Message, err error) {
	t.Helper()
	if err != nil {
		checkError(t, err)
		return
	}
	checkValid(t, set, req)
	switch resp := resp.(type) {
	case *allotv1.AcquireResponse:
		checkLeases(t, set, req.(*allotv1.AcquireRequest), resp)
	case *allotv1.CheckResponse:
		checkDecision(t, set, req.(*allotv1.CheckRequest), resp)
	case *allotv1.GetRulesResponse:
		got, err := rules.FromProto(resp)
		if err != nil || got.Version() != set.Version() {
			t.Fatalf("GetRules: %v, %v; want version %s", got, err, set.Version())
		}
	}
}

// fieldPath is every field validation may name.
var fieldPath = regexp.MustCompile(`^(request|node_id|requests|returns|rule|key|cost|` +
	`requests\[\d+\](\.(rule|key|want|consumed|consumed_age|want_rate|demand|returned))?|` +
	`returns\[\d+\]\.(rule|key|tokens))$`)

// checkError: the codes of the caller's fault, never Internal or Unknown;
// InvalidArgument begins with the field it blames and says it again in a
// BadRequest detail.
func checkError(t *testing.T, err error) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a gRPC status", err)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument:
		field, _, found := strings.Cut(msg, ": ")
		if !found || !fieldPath.MatchString(field) {
			t.Fatalf("InvalidArgument %q does not begin with a field", msg)
		}
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) == 1 && br.GetFieldViolations()[0].GetField() == field {
				return
			}
		}
		t.Fatalf("InvalidArgument %q: no BadRequest detail naming %s", msg, field)
	case codes.NotFound:
		if !strings.Contains(msg, "unknown rule") {
			t.Fatalf("NotFound %q does not say the rule is unknown", msg)
		}
	case codes.FailedPrecondition:
		if !strings.Contains(msg, "strict") {
			t.Fatalf("FailedPrecondition %q does not say the rule is strict", msg)
		}
	case codes.ResourceExhausted, codes.OutOfRange:
	default:
		t.Fatalf("client input answered %v: %q", st.Code(), msg)
	}
}

// checkValid: what validation promises of every request it lets through.
func checkValid(t *testing.T, set *rules.Set, req proto.Message) {
	t.Helper()
	l := DefaultLimits()
	fail := func(what string) {
		t.Helper()
		t.Fatalf("accepted a request with %s: %v", what, req)
	}
	node := func(n string) {
		if n == "" || len(n) > l.MaxNodeIDBytes || !utf8.ValidString(n) {
			fail("a bad node_id")
		}
	}
	entry := func(rule, key string, leased bool, tokens ...int64) {
		r, ok := set.Get(rule)
		if !ok || leased && !r.Leasable() {
			fail("a rule it cannot serve")
		}
		if key == "" || len(key) > l.MaxKeyBytes || !utf8.ValidString(key) {
			fail("a bad key")
		}
		for _, n := range tokens {
			if n < 0 || n > l.MaxTokens {
				fail("a token count out of range")
			}
		}
	}
	switch req := req.(type) {
	case *allotv1.AcquireRequest:
		node(req.GetNodeId())
		if n := len(req.GetRequests()); n == 0 || n > l.MaxBatch {
			fail("a bad batch")
		}
		for _, lr := range req.GetRequests() {
			entry(lr.GetRule(), lr.GetKey(), true, lr.GetWant(), lr.GetConsumed(), lr.GetReturned(), lr.GetHeld())
			if r := lr.GetWantRate(); math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
				fail("a bad want_rate")
			}
			if d := lr.GetDemand(); math.IsNaN(d) || math.IsInf(d, 0) || d < 0 {
				fail("a bad demand")
			}
			if a := lr.GetConsumedAge(); a != nil && (a.CheckValid() != nil || a.AsDuration() < 0) {
				fail("a bad consumed_age")
			}
		}
	case *allotv1.ReleaseRequest:
		node(req.GetNodeId())
		if n := len(req.GetReturns()); n == 0 || n > l.MaxBatch {
			fail("a bad batch")
		}
		for _, rt := range req.GetReturns() {
			entry(rt.GetRule(), rt.GetKey(), true, rt.GetTokens(), rt.GetHeld())
		}
	case *allotv1.CheckRequest:
		entry(req.GetRule(), req.GetKey(), false, req.GetCost())
		if r, _ := set.Get(req.GetRule()); max(req.GetCost(), 1) > r.Capacity() {
			fail("a cost above the capacity")
		}
	}
}

// checkLeases: one lease per request, in order, each within what the rule
// allows in one call.
func checkLeases(t *testing.T, set *rules.Set, req *allotv1.AcquireRequest, resp *allotv1.AcquireResponse) {
	t.Helper()
	if len(resp.GetLeases()) != len(req.GetRequests()) {
		t.Fatalf("%d leases for %d requests", len(resp.GetLeases()), len(req.GetRequests()))
	}
	if resp.GetRulesVersion() != set.Version() {
		t.Fatalf("rules_version %q, want %q", resp.GetRulesVersion(), set.Version())
	}
	for i, l := range resp.GetLeases() {
		lr := req.GetRequests()[i]
		r, _ := set.Get(lr.GetRule())
		bad := func(what string) {
			t.Helper()
			t.Fatalf("lease %d %v for %v: %s", i, l, lr, what)
		}
		if l.GetRule() != lr.GetRule() || l.GetKey() != lr.GetKey() {
			bad("not the rule and key asked for")
		}
		if g := l.GetGranted(); g < 0 || g > lr.GetWant() || g > r.Lease.Max || g > r.Capacity() {
			bad("granted more than wanted, than lease.max or than the capacity")
		}
		if l.GetRemaining() < 0 || l.GetRemaining() > r.Capacity() {
			bad("remaining out of [0, capacity]")
		}
		if l.GetLimit() != r.Limit {
			bad("not the rule's limit")
		}
		if err := l.GetTtl().CheckValid(); err != nil || l.GetTtl().AsDuration() <= 0 || l.GetTtl().AsDuration() > r.Lease.TTL {
			bad("ttl out of (0, lease.ttl]")
		}
		if err := l.GetRetryAfter().CheckValid(); err != nil || l.GetRetryAfter().AsDuration() < 0 {
			bad("a negative retry_after")
		}
		if rate := l.GetRate(); math.IsNaN(rate) || rate < 0 || rate > r.Rate()*(1+1e-9) || rate > lr.GetWantRate() {
			bad("a rate beyond the rule's or the one wanted")
		}
		if l.GetHolders() < 1 {
			bad("no holder")
		}
	}
}

// checkDecision: the answer to Check is within the rule's figures.
func checkDecision(t *testing.T, set *rules.Set, req *allotv1.CheckRequest, resp *allotv1.CheckResponse) {
	t.Helper()
	r, _ := set.Get(req.GetRule())
	bad := func(what string) {
		t.Helper()
		t.Fatalf("Check %v answered %v: %s", req, resp, what)
	}
	if resp.GetLimit() != r.Limit {
		bad("not the rule's limit")
	}
	if resp.GetRemaining() < 0 || resp.GetRemaining() > r.Capacity() {
		bad("remaining out of [0, capacity]")
	}
	for _, d := range []*durationpb.Duration{resp.GetRetryAfter(), resp.GetResetAfter()} {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			bad("a negative or invalid duration")
		}
	}
	if !resp.GetAllowed() && resp.GetRetryAfter().AsDuration() <= 0 {
		bad("a refusal with no retry_after")
	}
}
