package lease

import (
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// requestState is a key's request on its way, or to send again, and the
// fallback admissions it owes a report of.
type requestState struct {
	inFlight *flight // its part of an Acquire in flight
	// The yes/no states of its requests.
	solo       bool    // asks in a call of its own after a rejected call
	sent       bool    // a request has been sent for it
	askedAgain bool    // demand was seen since its last request left
	short      bool    // its last grant fell short of what it asked for
	starved    bool    // demand went unmet since its last request left
	unacked    *flight // a request that failed, to be sent again as it was
	seq        uint64  // the sequence number of its last request
	// owed are fallback admissions no report carries yet, made after the
	// request that closed the key's allowance left; owedSince is when the
	// first of them was admitted.
	owed      int64
	owedSince mono
	// unused are tokens that died with their lease unspent, to give back
	// with the next request, which leaves at once: while the lease holds
	// at the store (it ends a sweep later there), they are credited, and a
	// window that lent them is not spent by them.
	unused int64
	// unusedEpoch is the window the unused tokens were lent in (window
	// rules): a return names the window it credits.
	unusedEpoch int64
	// spentAt is the last Turn that learned the key spent (bitSpent), at or
	// after the spending, or when its last request left if later: since
	// then it has held no more than it holds (but for what its share
	// earned), which its next request says (Request.HeldFor).
	spentAt mono
}

// flight is one key's part of an Acquire in flight.
type flight struct {
	want, consumed          int64
	settled                 int64 // the key's debt, handed to this request (debt.go)
	wantRate                float64
	wantRateNodes           int     // what wantRate divided the rule's rate by, if not measured (Request.WantRateNodes)
	demand                  float64 // the key's demand as it left, tokens/s (Request.Demand)
	age                     time.Duration
	sent                    mono // of the first attempt
	returned, returnedEpoch int64
	held                    int64
	heldFor                 time.Duration
	seq                     uint64
	onFallback              bool // sent while the allocator was taken for down
}

// rateShare is the share of the rule's rate a key earns (share.go): tokens
// per second from `from` until end; accrued holds the fraction of a token
// not yet in the lease (negative: owed), capTokens the most the share may
// pile up, overflow what it earned beyond that, to be given back, fullAt
// the most the key held when its share overflowed since the overflow was
// last given back, and pooled what it put in the key's tokens since the
// key's request left.
type rateShare struct {
	rate      float64
	from, end mono
	accrued   float64
	capTokens int64
	overflow  int64
	fullAt    int64
	pooled    int64
}

// queueState is where a key stands in the Core's queues: its live entries
// in the request and timer queues (32 bits are plenty: a stale entry would
// be taken for the live one only after 2^32 more pushes of the key while it
// waits), when its timer is due, and its place in the sweep's set.
type queueState struct {
	pending            bool // in the Core's next call
	delaySeq, timerSeq uint32
	timerAt            mono
	setIndex           int // 1 + its index in the sweep's set; 0: not in it
}

// owes reports whether the key admitted on fallback what no report has
// carried yet.
func (k *KeyLease) owes() bool {
	if k.req.owed > 0 || k.debt.Load() > 0 {
		return true
	}
	a := k.fallback.Load()
	return a != nil && a.Pending()
}

// rate is the share of the rule's rate the key earns, tokens per second.
func (k *KeyLease) shareRate() float64 {
	if k.share == nil {
		return 0
	}
	return k.share.rate
}

// takeOverflow returns what the key's share earned beyond its cap, to give
// back, and clears it, with what the key held when it overflowed. The
// return says it still holds that much: the store credits an overflow only
// below its ceiling with it (store.state.ceiling). The key overflowed
// because it was full; had the bucket been full too, a central limiter
// would have lost what the share earned. Reported with what the key holds
// once it has spent since, the overflow was credited as room the bucket
// never had, and lent again beside the share's next tokens: a node alone
// on a rule of burst 1 at 5/s admitted 9 in a second where b + 1.1·r + 2·n
// is 8.5.
func (k *KeyLease) takeOverflow() (n, fullAt int64) {
	if k.share == nil {
		return 0, 0
	}
	n, fullAt = k.share.overflow, k.share.fullAt
	k.share.overflow, k.share.fullAt = 0, 0
	if n == 0 {
		fullAt = 0
	}
	return n, fullAt
}

// unusedNow takes the unused tokens for a return that names the key's
// epoch: a window rule's tokens of an older window than the newest lease's
// are dropped, as their window has ended (returned under the new window's
// epoch, they were credited there and lent again: a fixed window of 1,000
// admitted 1,008).
func (k *KeyLease) unusedNow() int64 {
	n := k.req.unused
	if k.Rule().Algorithm != rules.TokenBucket && k.req.unusedEpoch != k.win.epoch.Load() {
		n = 0
	}
	k.req.unused = 0
	return n
}
