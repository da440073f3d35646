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
	// Now reads the store's clock, with FakeClock: the calendar tests go to
	// given dates.
	Now func() time.Time
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
	return acquireReq(t, s, store.AcquireRequest{Rule: r, Key: key, Node: node, Want: want, Consumed: consumed})
}

// acquireReq sends one request, which must succeed, and returns its lease.
func acquireReq(t *testing.T, s store.Store, req store.AcquireRequest) store.Lease {
	t.Helper()
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{req})
	if err != nil {
		t.Fatalf("Acquire(%s, want %d, consumed %d): %v", req.Node, req.Want, req.Consumed, err)
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
		{"HeldForKeepsEarlierRefillOut", testHeldForKeepsEarlierRefillOut},
		{"BucketFullness", testBucketFullness},
		{"BucketWithTinyRateStillLimits", testBucketTinyRate},
		{"FairShareAcrossHolders", testFairShare},
		{"HoldersExpire", testHoldersExpire},
		{"ReleaseForgetsHolder", testReleaseForgetsHolder},
		{"AbsentHolderReservesBucket", testAbsentHolderReservesBucket},
		{"AbsentHolderReservesWindow", testAbsentHolderReservesWindow},
		{"FallbackReturnKeepsReservation", testFallbackReturnKeepsReservation},
		{"AbsentHoldersAreKept", testAbsentHoldersAreKept},
		{"BackHolderKeepsReservationBucket", testBackHolderKeepsReservationBucket},
		{"BackHolderKeepsReservationWindow", testBackHolderKeepsReservationWindow},
		{"FallbackSharesFitTheRule", testFallbackSharesFitTheRule},
		{"BatchKeepsOrder", testBatchOrder},
		{"FixedWindowLeaseEndsWithWindow", testFixedWindowLease},
		{"SlidingWindowLeaseEndsWithWindow", testSlidingWindowLease},
		{"FixedWindowDropsOldReturns", testFixedWindowOldReturn},
		{"SlidingWindowCountsPrevious", testSlidingWindow},
		{"WindowStartAndEnd", testWindowStartAndEnd},
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
		{"SettledBucketDebt", testSettledBucketDebt},
		{"SettledOnce", testSettledOnce},
		{"SettledWindow", testSettledWindow},
		{"SettledStrict", testSettledStrict},
		{"WindowsLendNoRate", testWindowsLendNoRate},
		{"CalendarCheckEndsWithTheMonth", testCalendarCheck},
		{"CalendarMonthEnds", testCalendarMonthEnds},
		{"CalendarDaysAcrossDST", testCalendarDST},
		{"CalendarSurvivesClockStepBack", testCalendarStepBack},
		{"CalendarReportIsDebited", testCalendarReport},
		{"WindowLimitRaisedAndCut", testWindowLimitRaisedAndCut},
	}
	tests = append(tests, slotTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, h) })
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
