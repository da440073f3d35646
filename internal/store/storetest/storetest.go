// Package storetest is the conformance suite every store.Store passes: the
// same assertions against the memory store (fake clock) and a real Redis.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Harness adapts a store to the suite.
type Harness struct {
	// New returns a store for one test. Stores may be shared between tests:
	// every test uses rule names of its own.
	New func(t *testing.T) store.Store
	// Advance moves the store's clock forward by at least d. A store on a
	// real clock sleeps.
	Advance func(t *testing.T, d time.Duration)
	// StepBack moves the store's clock back by exactly d, as a failover to a
	// replica whose clock is behind does. Optional: a store whose clock
	// cannot step skips the tests that need it.
	StepBack func(t *testing.T, d time.Duration)
	// FakeClock says that Advance moves the store's clock without taking
	// the time, to the microsecond: the tests that wait out an absence (a
	// minute at least) or need exact instants run only then.
	FakeClock bool
}

// needFakeClock skips a test on a store whose clock runs by itself.
func needFakeClock(t *testing.T, h Harness) {
	t.Helper()
	if !h.FakeClock {
		t.Skip("needs a fake clock: waits out an absence, or counts exact instants")
	}
}

var ruleSeq atomic.Int64

// rule returns a normalized copy of r named uniquely for this test run, so
// that tests sharing one Redis never meet.
func rule(t *testing.T, r rules.Rule) *rules.Rule {
	t.Helper()
	r.Name = fmt.Sprintf("st%d-%d-%s", time.Now().UnixNano()%1e9, ruleSeq.Add(1), r.Name)
	if len(r.Name) > rules.MaxNameLength {
		r.Name = r.Name[:rules.MaxNameLength]
	}
	if err := r.Normalize(); err != nil {
		t.Fatalf("test rule: %v", err)
	}
	return &r
}

// A day-long period keeps refill negligible for the length of a test even
// on a store whose clock runs by itself (100 tokens a day is one token every
// 14 minutes), so counts are exact.
const slow = 24 * time.Hour

func bucketRule(t *testing.T, capacity int64) *rules.Rule {
	return rule(t, rules.Rule{Name: "tb", Algorithm: rules.TokenBucket, Limit: capacity, Period: slow})
}

func acquire(t *testing.T, s store.Store, r *rules.Rule, key, node string, want, consumed int64) store.Lease {
	t.Helper()
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: key, Node: node, Want: want, Consumed: consumed}})
	if err != nil {
		t.Fatalf("Acquire(%s, want %d, consumed %d): %v", node, want, consumed, err)
	}
	if len(ls) != 1 {
		t.Fatalf("Acquire returned %d leases for 1 request", len(ls))
	}
	return ls[0]
}

// leave releases node's holding of key, giving nothing back: the node is
// gone, not absent, and nothing is reserved for it.
func leave(t *testing.T, s store.Store, r *rules.Rule, key, node string) {
	t.Helper()
	if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: key, Node: node}}); err != nil {
		t.Fatalf("Release(%s): %v", node, err)
	}
}

func check(t *testing.T, s store.Store, r *rules.Rule, key string, cost int64) store.Decision {
	t.Helper()
	d, err := s.Check(context.Background(), r, key, cost)
	if err != nil {
		t.Fatalf("Check(cost %d): %v", cost, err)
	}
	return d
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"BucketGrantsUpToAvailable", testBucketGrants},
		{"BucketConsumedIsDebited", testBucketConsumed},
		{"BucketDebtIsBounded", testBucketDebt},
		{"OldConsumptionInWindows", testOldConsumption},
		{"LateConsumptionDebitedInFull", testLateConsumptionDebitedInFull},
		{"ConsumptionCapCountsAnAbsence", testConsumptionCapCountsAnAbsence},
		{"StrictLateConsumptionDebitedInFull", testStrictLateConsumptionDebitedInFull},
		{"BucketReleaseCappedAtCapacity", testBucketRelease},
		{"BucketRefills", testBucketRefills},
		{"HeldCapsBucket", testHeldCapsBucket},
		{"BucketFullness", testBucketFullness},
		{"BucketWithTinyRateStillLimits", testBucketTinyRate},
		{"FairShareAcrossHolders", testFairShare},
		{"HoldersExpire", testHoldersExpire},
		{"ReleaseForgetsHolder", testReleaseForgetsHolder},
		{"AbsentHolderReservesBucket", testAbsentHolderReservesBucket},
		{"AbsentHolderReservesWindow", testAbsentHolderReservesWindow},
		{"AbsentHoldersAreKept", testAbsentHoldersAreKept},
		{"BackHolderKeepsReservationBucket", testBackHolderKeepsReservationBucket},
		{"BackHolderKeepsReservationWindow", testBackHolderKeepsReservationWindow},
		{"FallbackSharesFitTheRule", testFallbackSharesFitTheRule},
		{"BatchKeepsOrder", testBatchOrder},
		{"FixedWindowLeaseEndsWithWindow", testFixedWindowLease},
		{"SlidingWindowLeaseEndsWithWindow", testSlidingWindowLease},
		{"FixedWindowDropsOldReturns", testFixedWindowOldReturn},
		{"SlidingWindowCountsPrevious", testSlidingWindow},
		{"FixedWindowSurvivesClockStepBack", testFixedWindowStepBack},
		{"SlidingWindowSurvivesClockStepBack", testSlidingWindowStepBack},
		{"SlidingLogSurvivesClockStepBack", testSlidingLogStepBack},
		{"WindowPeriodChange", testWindowPeriodChange},
		{"CheckBucket", testCheckBucket},
		{"CheckFixedWindow", testCheckFixedWindow},
		{"CheckSlidingLog", testCheckSlidingLog},
		{"CheckCostAboveCapacity", testCheckCostAboveCapacity},
		{"StrictRulesAreNotLeased", testStrictNotLeased},
		{"KeysAreIndependent", testKeysIndependent},
		{"ConcurrentChecksCountExactly", testConcurrentChecks},
		{"ConcurrentAcquiresNeverOvergrant", testConcurrentAcquires},
		{"CanceledContext", testCanceledContext},
		{"ShareSplit", testShareSplit},
		{"ShareWithholdsRefill", testShareWithholdsRefill},
		{"ShareEndsWithLease", testShareEndsWithLease},
		{"ShareHeldBackByDebt", testShareHeldBackByDebt},
		{"AcquireReturned", testAcquireReturned},
		{"ReturnsOnAcquireCreditOnlyUnspent", testReturnsOnAcquireCreditOnlyUnspent},
		{"ReleaseCreditsOnlyUnspent", testReleaseCreditsOnlyUnspent},
		{"ReturnsCreditHeld", testReturnsCreditHeld},
		{"AcquireIsIdempotent", testAcquireIsIdempotent},
		{"StrictConsumptionIsReported", testStrictConsumptionIsReported},
		{"WindowsLendNoRate", testWindowsLendNoRate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, h) })
	}
}

func testBucketGrants(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	if l := acquire(t, s, r, "k", "n1", 30, 0); l.Granted != 30 || l.Remaining != 70 || l.Holders != 1 {
		t.Fatalf("first lease %+v, want granted 30, remaining 70, holders 1", l)
	}
	l := acquire(t, s, r, "k", "n1", 100, 0)
	if l.Granted != 70 || l.Remaining != 0 {
		t.Fatalf("second lease %+v, want the 70 left", l)
	}
	if l.RetryAfter <= 0 {
		t.Fatalf("short grant without retry_after: %+v", l)
	}
	if l.TTL != r.Lease.TTL {
		t.Fatalf("ttl %v, want the rule's %v", l.TTL, r.Lease.TTL)
	}
	if l := acquire(t, s, r, "k", "n1", 5, 0); l.Granted != 0 {
		t.Fatalf("empty bucket granted %d", l.Granted)
	}
}

func testBucketConsumed(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	if l := acquire(t, s, r, "k", "n1", 0, 30); l.Granted != 0 || l.Remaining != 70 {
		t.Fatalf("report of 30 consumed: %+v, want remaining 70", l)
	}
	if l := acquire(t, s, r, "k", "n1", 100, 0); l.Granted != 70 {
		t.Fatalf("granted %d after 30 consumed, want 70", l.Granted)
	}
}

func testBucketDebt(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	// Each report stops at the node's fallback share (the capacity over
	// the holders, the reporter counted): a node alone empties the bucket.
	acquire(t, s, r, "k", "n1", 0, 1_000_000)
	if d := debtWait(t, s, r, "k"); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("100 tokens come in %v after one node's report of a million, want about 24h: the report stops at its share", d)
	}
	// More nodes report, each up to its share of the capacity over the
	// holders it joins (34, 25, 20 and 17 of 100): 96 owed, and 100 more
	// tokens take about two days at 100 a day.
	for _, n := range []string{"n2", "n3", "n4", "n5"} {
		acquire(t, s, r, "k", n, 0, 1_000_000)
	}
	if d := debtWait(t, s, r, "k"); d < 47*time.Hour || d > 49*time.Hour {
		t.Fatalf("100 tokens come in %v after reports of millions, want about 48h: each report must stop at its share", d)
	}
}

// debtWait is how long 100 tokens of the key take to come, asked by a
// node that holds nothing: the debt shows in it (100 a day, slow).
func debtWait(t *testing.T, s store.Store, r *rules.Rule, key string) time.Duration {
	t.Helper()
	l := acquire(t, s, r, key, "observer", 100, 0)
	if l.Granted != 0 {
		t.Fatalf("a bucket in debt granted %d", l.Granted)
	}
	return l.RetryAfter
}

// A window takes the consumption that began in it, and drops what began in
// a window that has ended: before, consumption a window old was charged to
// the current window, up to its limit.
func testOldConsumption(t *testing.T, h Harness) {
	s := h.New(t)
	report := func(r *rules.Rule, key string, age time.Duration) {
		t.Helper()
		req := []store.AcquireRequest{{Rule: r, Key: key, Node: "n1", Consumed: 1_000_000, ConsumedAge: age}}
		if _, err := s.Acquire(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	give := func(r *rules.Rule, key string, n, epoch int64) {
		t.Helper()
		if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: key, Node: "n1", Tokens: n, Epoch: epoch, Held: n, HeldKnown: true}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, alg := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow} {
		w := windowRule(t, alg, 50, slow)
		l0 := acquire(t, s, w, "old", "n1", 10, 0)
		report(w, "old", slow+time.Hour)
		give(w, "old", 10, l0.Epoch) // the 10 it was lent
		if l := acquire(t, s, w, "old", "n1", 50, 0); l.Epoch == l0.Epoch && l.Granted != 50 {
			t.Fatalf("%s: granted %d of 50 in a window after consumption that began in an ended one, want all 50: it is dropped", alg, l.Granted)
		}
		// Consumption of this window counts in it, up to the ceiling of 2x.
		req := []store.AcquireRequest{{Rule: w, Key: "new", Node: "n1", Consumed: 20, ConsumedAge: time.Millisecond}}
		if _, err := s.Acquire(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if l := acquire(t, s, w, "new", "n1", 50, 0); l.Granted != 30 {
			t.Fatalf("%s: granted %d of 50 after 20 consumed a millisecond ago, want 30", alg, l.Granted)
		}
	}
}

// A node that returns more than it was lent, whatever it says it holds,
// gets back no more than it was lent.
func testBucketRelease(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	acquire(t, s, r, "k", "n1", 50, 0)
	ret := []store.Return{{Rule: r, Key: "k", Node: "n1", Tokens: 80, Held: 80, HeldKnown: true}}
	if err := s.Release(context.Background(), ret); err != nil {
		t.Fatal(err)
	}
	if d := check(t, s, r, "k", 1); d.Remaining != 99 {
		t.Fatalf("remaining %d after over-return, want 99: credit is capped at what was lent, and at capacity", d.Remaining)
	}
}

func testBucketRefills(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "fast", Algorithm: rules.TokenBucket, Limit: 100, Period: time.Second, Burst: 10})
	if l := acquire(t, s, r, "k", "n1", 10, 0); l.Granted != 10 {
		t.Fatalf("granted %d, want the burst 10", l.Granted)
	}
	h.Advance(t, 50*time.Millisecond) // 5 tokens at 100/s
	l := acquire(t, s, r, "k", "n1", 10, 0)
	if l.Granted < 5 {
		t.Fatalf("granted %d after 50ms at 100/s, want at least 5", l.Granted)
	}
	h.Advance(t, time.Second)
	if l := acquire(t, s, r, "k", "n1", 100, 0); l.Granted != 10 {
		t.Fatalf("granted %d after a long idle, want the capacity 10 and no more", l.Granted)
	}
}

func testBucketTinyRate(t *testing.T, h Harness) {
	s := h.New(t)
	// A burst of a million at one token a year: refilling the bucket takes
	// ~3e19 µs, more than an int64 holds. The state must still expire late,
	// not wrap around to "already expired" and come back full.
	r := rule(t, rules.Rule{Name: "tiny", Algorithm: rules.TokenBucket, Limit: 1, Period: rules.MaxPeriod, Burst: 1_000_000})
	if l := acquire(t, s, r, "k", "n", 1_000_000, 0); l.Granted != 1_000_000 {
		t.Fatalf("first lease %+v, want the burst", l)
	}
	if l := acquire(t, s, r, "k", "n", 1_000_000, 0); l.Granted != 0 || l.RetryAfter <= 0 {
		t.Fatalf("lease from the emptied bucket %+v, want nothing and a positive retry_after", l)
	}
	if d := check(t, s, r, "k", 1); d.Allowed || d.RetryAfter <= 0 || d.ResetAfter <= 0 {
		t.Fatalf("check on the emptied bucket %+v, want refused with positive retry_after and reset_after", d)
	}
}

func testFairShare(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	// Three modest holders register (want 10, granted 10 each).
	for _, n := range []string{"a", "b", "c"} {
		acquire(t, s, r, "k", n, 10, 0)
	}
	// 70 left. A greedy node must leave the modest ones their 10 each.
	l := acquire(t, s, r, "k", "greedy", 1000, 0)
	if l.Granted != 40 || l.Holders != 4 {
		t.Fatalf("greedy lease %+v, want granted 40 (70 less 3x10 kept for the others), holders 4", l)
	}
	// The 30 kept back are shared by level: all four want at least 30/4.
	if l := acquire(t, s, r, "k", "a", 10, 0); l.Granted != 7 {
		t.Fatalf("node a got %d after the greedy node, want 7 (30 shared by 4 holders)", l.Granted)
	}
	// A share that rounds to zero still lends a token.
	small := bucketRule(t, 2)
	for i, n := range []string{"a", "b", "c"} {
		if l := acquire(t, s, small, "k", n, 5, 0); l.Granted != []int64{2, 0, 0}[i] {
			t.Fatalf("tiny bucket, node %s got %d", n, l.Granted)
		}
	}
	if err := s.Release(context.Background(), []store.Return{{Rule: small, Key: "k", Node: "a", Tokens: 1, Held: 2, HeldKnown: true}}); err != nil {
		t.Fatal(err)
	}
	if l := acquire(t, s, small, "k", "b", 5, 0); l.Granted != 1 {
		t.Fatalf("one token over two holders: granted %d, want 1", l.Granted)
	}
}

// A holder whose lease ended without a release is absent, and counted,
// until its absence ends (a minute here); then it is forgotten.
func testHoldersExpire(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "ttl", Algorithm: rules.TokenBucket, Limit: 100, Period: slow,
		Lease: rules.LeaseTuning{TTL: 100 * time.Millisecond}})
	acquire(t, s, r, "k", "a", 1, 0)
	if l := acquire(t, s, r, "k", "b", 1, 0); l.Holders != 2 {
		t.Fatalf("holders %d, want 2", l.Holders)
	}
	h.Advance(t, 150*time.Millisecond)
	if l := acquire(t, s, r, "k", "b", 1, 0); l.Holders != 2 {
		t.Fatalf("holders %d after a's lease ended, want 2: a is absent, not gone", l.Holders)
	}
	needFakeClock(t, h)
	h.Advance(t, r.Lease.Absence())
	if l := acquire(t, s, r, "k", "b", 1, 0); l.Holders != 1 {
		t.Fatalf("holders %d after a's absence ended, want 1", l.Holders)
	}
}

func testReleaseForgetsHolder(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	acquire(t, s, r, "k", "a", 1, 0)
	acquire(t, s, r, "k", "b", 1, 0)
	if err := s.Release(context.Background(), []store.Return{{Rule: r, Key: "k", Node: "a", Tokens: 1}}); err != nil {
		t.Fatal(err)
	}
	if l := acquire(t, s, r, "k", "b", 1, 0); l.Holders != 1 {
		t.Fatalf("holders %d after a released, want 1", l.Holders)
	}
}

func testBatchOrder(t *testing.T, h Harness) {
	s := h.New(t)
	a, b := bucketRule(t, 10), bucketRule(t, 20)
	reqs := []store.AcquireRequest{
		{Rule: a, Key: "x", Node: "n", Want: 100},
		{Rule: b, Key: "x", Node: "n", Want: 100},
		{Rule: a, Key: "y", Node: "n", Want: 3},
	}
	ls, err := s.Acquire(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	got := []int64{ls[0].Granted, ls[1].Granted, ls[2].Granted}
	if got[0] != 10 || got[1] != 20 || got[2] != 3 {
		t.Fatalf("granted %v, want [10 20 3] in request order", got)
	}
}

func testStrictNotLeased(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "log", Algorithm: rules.SlidingLog, Limit: 5, Period: time.Hour})
	_, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "n", Want: 1}})
	if !errors.Is(err, store.ErrNotLeasable) {
		t.Fatalf("Acquire on a sliding log: %v, want ErrNotLeasable", err)
	}
}

func testKeysIndependent(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 3)
	// Keys that could collide in a naive encoding.
	keys := []string{"a", "a:b", "a}b", "{a}", "", "ü", strings.Repeat("x", 200)}
	for _, k := range keys {
		if l := acquire(t, s, r, k, "n", 3, 0); l.Granted != 3 {
			t.Fatalf("key %q granted %d, want its own 3", k, l.Granted)
		}
	}
}
