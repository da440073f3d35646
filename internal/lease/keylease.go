package lease

import (
	"math"
	"sync/atomic"

	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
)

// left marks a key that has left its table: every Take fails and the
// caller looks the key up again.
const left = math.MinInt64 / 2

// KeyLease is one key's lease on this node: the tokens the allocator lent
// it, the share of the rule's rate it earns, and, while the allocator
// cannot be reached, its fallback allowance. Take is the hot path: one
// atomic compare-and-swap, no clock, no lock, no allocation. The rest is a
// state machine that the Core drives (phase.go); the atomics are what the
// hot path and callers' decisions read of it.
type KeyLease struct {
	tokens    atomic.Int64              // spendable leased tokens; < 0 once it left
	gen       atomic.Uint64             // bumped when tokens die with their lease, or a span they were charged to goes (Give)
	low       atomic.Int64              // the watermark: below it a refill is asked for
	bits      atomic.Uint32             // queued, asleep (hot.go)
	demand    atomic.Int64              // asked of the key and not taken from its lease: the rate estimate's
	holders   atomic.Int32              // the allocator's last count of the key's holders
	fallbackN atomic.Int32              // what the allocator last told its fallback to divide by, at least; 0: not told
	owner     atomic.Pointer[ownerSays] // what its owner says of it (owner.go); nil: a node's own key
	liveUntil atomic.Int64              // the mono at which its oldest leased tokens die, any rule; 0: none (live.go)
	notBefore atomic.Int64              // the mono before which no refill leaves
	served    atomic.Int64              // the mono the newest lease ends at, at the latest; 0: never answered
	central   atomic.Int64              // what the allocator had left after the key's last grant
	debt      atomic.Int64              // settled costs beyond what it held, not yet paid or reported (debt.go)
	// fallback is the key's allowance while the allocator cannot be
	// reached: made by the first decision that needs it, closed by the
	// grant that follows.
	fallback atomic.Pointer[fallback.Allowance]
	// win is what a window rule's key knows of the store's windows.
	win windowState
	// keyRule is the key's rule when the table's rule has overrides.
	keyRule atomic.Pointer[keyRule]
	table   *Table
	key     string

	// The Core's alone.
	phase phase
	spans spans        // the leased tokens, by the instant they die
	share *rateShare   // the share of the rule's rate; nil until it first has one
	est   estimate     // its demand, and the lease size that follows
	req   requestState // the request in flight, or to send again
	q     queueState   // its places in the Core's queues
}

// windowState is what a window rule's key knows of the store's windows;
// a token bucket's key leaves it zero. The hot path and decisions read it.
type windowState struct {
	freesAt atomic.Int64 // the mono at which the store said its window frees a refused want; 0: none
	spendBy atomic.Int64 // the mono at which its oldest leased tokens die; 0: none (syncSpendBy)
	epoch   atomic.Int64 // the window of its newest lease
	// closed is the allowance the last grant closed: the next one goes on
	// with its count in a window they share.
	closed atomic.Pointer[fallback.Allowance]
	// unanswered is the mono until which the store may apply the key's
	// last request, which no answer has come for (its call's deadline):
	// applied, it counts the node present in its window, so the key does
	// not fall back there; 0: answered.
	unanswered atomic.Int64
}

// keyRule is the rule of one key, resolved from the table's rule from.
type keyRule struct{ from, rule *rules.Rule }

// Key is the key this lease is for.
func (k *KeyLease) Key() string { return k.key }

// Rule is the rule for the key: the table's current rule, or its override
// for the key. It is resolved again when the table's rule changes.
func (k *KeyLease) Rule() *rules.Rule {
	base := k.table.Rule()
	if !base.HasOverrides() {
		return base
	}
	if kr := k.keyRule.Load(); kr != nil && kr.from == base {
		return kr.rule
	}
	kr := &keyRule{from: base, rule: base.ForKey(k.key)}
	k.keyRule.Store(kr)
	return kr.rule
}

// Holders is the allocator's last count of the key's holders, 0 if unknown.
func (k *KeyLease) Holders() int { return int(k.holders.Load()) }

// syncSpendBy tells the hot path when a window key's oldest leased tokens
// die, after the Core changed its spans: Decide spends none past it, also
// when the Core is late to take them out. A token bucket's say nothing (a
// lease's tokens spent late pass no window).
func (k *KeyLease) syncSpendBy() {
	k.syncLive()
	at, ok := k.spans.next()
	if !ok || k.Rule().Algorithm == rules.TokenBucket {
		at = 0
	}
	k.win.spendBy.Store(int64(at))
}

// FallbackNodes is what the allocator last told the key's fallback to
// divide the rule by, at least (Grant.FallbackNodes), 0 if it did not say:
// Decide divides by no fewer, whatever the fleet's count.
func (k *KeyLease) FallbackNodes() int { return int(k.fallbackN.Load()) }

// Tokens is the number of leased tokens held now.
func (k *KeyLease) Tokens() int64 { return max(k.tokens.Load(), 0) }

// taken is how many tokens Take has spent in all: what went in less what
// is left. Only the Core calls it.
func (k *KeyLease) taken() int64 { return k.spans.credited - max(k.tokens.Load(), 0) }

// settleSpans charges the hot path's spends to the key's spans (settle);
// when a span goes with them, what was taken before can no longer be
// given back (Give, Undo): it is of no lease now.
func (k *KeyLease) settleSpans() {
	if k.spans.settle(k.taken()) {
		k.gen.Add(1)
	}
}

// remove takes up to n tokens out for the Core (expiry, a return) and
// reports how many it took.
func (k *KeyLease) remove(n int64) int64 {
	if n <= 0 {
		return 0
	}
	for {
		v := k.tokens.Load()
		got := min(max(v, 0), n)
		if got == 0 {
			return 0
		}
		if k.tokens.CompareAndSwap(v, v-got) {
			k.spans.credited -= got
			return got
		}
	}
}

// add puts n tokens in for the Core; a debt is paid from them first.
func (k *KeyLease) add(n int64) {
	k.tokens.Add(n)
	k.spans.credited += n
	k.table.c.credited.Add(n)
	k.payDebt()
}
