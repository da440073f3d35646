package storetest

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Consumption a node admitted outside a lease is debited in full however
// late it is reported (docs/design.md, guarantee 4), up to what its fallback allowance
// could have admitted: the capacity and the rate divided over the key's
// holders, the rate counted for at most an absence.

// Before, the debt the bucket would have repaid by refilling since the
// consumption began was forgiven: half of it, here.
func testLateConsumptionDebitedInFull(t *testing.T, h Harness) {
	s, r := h.New(t), bucketRule(t, 100)
	acquire(t, s, r, "k", "n1", 100, 0) // drained
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "n1", Consumed: 100, ConsumedAge: slow / 2})
	if d := debtWait(t, s, r, "k"); d < 47*time.Hour || d > 49*time.Hour {
		t.Fatalf("100 tokens come in %v after 100 consumed half a day ago were reported, want about 48h (all 100 owed)", d)
	}
}

// A report's cap counts the rate for an absence at most, however old the
// consumption it claims: one report cannot put a key in debt beyond what a
// node alone could have admitted while it was away.
func testConsumptionCapCountsAnAbsence(t *testing.T, h Harness) {
	s := h.New(t)
	// 1 a second, burst 10, a 2 s TTL: an absence is a minute.
	r := rule(t, rules.Rule{Name: "cap", Algorithm: rules.TokenBucket, Limit: 60, Period: time.Minute, Burst: 10})
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "n1", Consumed: 1_000_000, ConsumedAge: time.Hour})
	l := acquire(t, s, r, "k", "observer", 10, 0)
	if l.Granted != 0 || l.RetryAfter < 69*time.Second || l.RetryAfter > 71*time.Second {
		t.Fatalf("after a report of a million admitted an hour ago: %+v, want nothing and 10 tokens in 70 s (a debt of the burst and a minute of the rate)", l)
	}
}

// A strict rule's report is debited in full too.
func testStrictLateConsumptionDebitedInFull(t *testing.T, h Harness) {
	s := h.New(t)
	r := rule(t, rules.Rule{Name: "stb", Algorithm: rules.TokenBucket, Limit: 10, Period: slow, Strict: true})
	if d := check(t, s, r, "k", 10); !d.Allowed {
		t.Fatalf("draining check %+v", d)
	}
	acquireRate(t, s, store.AcquireRequest{Rule: r, Key: "k", Node: "a", Consumed: 10, ConsumedAge: slow / 2})
	// 11 tokens at 10 a day: the 10 owed, then the one asked.
	if d := check(t, s, r, "k", 1); d.Allowed || d.RetryAfter < 26*time.Hour || d.RetryAfter > 27*time.Hour {
		t.Fatalf("after 10 consumed half a day ago were reported on a drained bucket: %+v, want refused for about 26.4h", d)
	}
}
