package lease

import "time"

// A pool's bookkeeping that only the manager goroutine touches: what every
// key keeps (managerState, inside the Pool), what only a busy key keeps
// (busyState), and the request a key has in flight.

// managerState is the pool's bookkeeping, touched only by the manager.
type managerState struct {
	credited    int64 // tokens ever put in minus tokens taken out by the manager
	expiry      mono  // when the newest lease's tokens die; zero: no lease
	servedUntil mono
	// busy holds what only a busy key needs; nil reads as all zeros.
	busy *busyState
	// rate is the EWMA of demand, tokens per second; fastRate the same over
	// two sweeps: how fast a share follows a surge. float32 keeps seven
	// digits, more than a lease size or a share needs, in half the bytes.
	rate, fastRate float32
	lastTaken      int64
	lastSample     mono
	lastActive     mono
	size           int64 // the lease size to ask for
	epoch          int64
	inFlight       *flight
	seq            uint64  // the sequence number of the key's last request
	unacked        *flight // a request that failed, to be sent again as it was
	timerAt        mono    // when the live timer entry is due; zero: none

	// The pool's live entries in the request queue and the timer queue.
	// 32 bits are plenty: a stale entry would be taken for the live one
	// only after exactly 2^32 more of the pool's pushes while it waits
	// (years of a key's requests), and then cost one early visit.
	delaySeq, timerSeq uint32

	// (The bools last: together they take one word.)
	initialized bool
	solo        bool // asks in a batch of its own after a rejected batch
	pending     bool // in the manager's next batch
	sent        bool // a request has been sent for the key
	givingBack  bool // a request giving the share back is on its way
	askedAgain  bool // demand was seen since the key's last request left
	asleep      bool // its share sleeps out of the tick (sleep.go)
	short       bool // its last grant fell short of what it asked for
}

// busyState is the part of a pool's bookkeeping that only a busy key
// needs: the carry of older leases and a share of the rule's rate. A key
// gets one the first time it needs it (a lease arrives while tokens are
// left, or a share comes with one) and keeps it while it lives; the many
// keys touched once or now and then never do, and save its 72 bytes (an
// 80 B allocation, less the pointer).
type busyState struct {
	// carry is what was left of older leases when a newer one arrived; those
	// tokens still die at carryExpiry. takenAtCarry is taken() at that moment.
	carry        int64
	carryExpiry  mono
	takenAtCarry int64

	// The share of the rule's rate (share.go): tokens per second earned from
	// shareFrom until shareEnd; accrued holds the fraction of a token not
	// yet in the pool (negative: owed); shareCap the most tokens the share
	// may pile up.
	share     float64
	shareFrom mono
	shareEnd  mono
	accrued   float64
	shareCap  int64
	// overflow is what the share earned beyond the pool's cap, to be given
	// back (share.go).
	overflow int64
}

// makeBusy returns the key's busy state, making it the first time.
func (o *managerState) makeBusy() *busyState {
	if o.busy == nil {
		o.busy = &busyState{}
	}
	return o.busy
}

// takeOverflow returns what the key's share earned beyond the pool's cap,
// to give back, and clears it.
func (o *managerState) takeOverflow() int64 {
	if o.busy == nil {
		return 0
	}
	n := o.busy.overflow
	o.busy.overflow = 0
	return n
}

// carry is what older leases left that dies before the newest lease.
func (o *managerState) carry() int64 {
	if o.busy == nil {
		return 0
	}
	return o.busy.carry
}

// shareRate is the share of the rule's rate the key earns, tokens per second.
func (o *managerState) shareRate() float64 {
	if o.busy == nil {
		return 0
	}
	return o.busy.share
}

// flight is one key's part of an Acquire in flight.
type flight struct {
	want, consumed          int64
	wantRate                float64
	age                     time.Duration
	sent                    mono // of the first attempt
	returned, returnedEpoch int64
	seq                     uint64
}
