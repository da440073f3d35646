package lease

// The hot path: what a caller's goroutine does to a key without the Core.

const (
	bitQueued uint32 = 1 << iota // a refill is queued or in flight (one per key)
	bitAsleep                    // its share sleeps (sleep.go): the next Take wakes it
	bitHurry                     // refused while its renewal waits: ask for tokens now (Core.hurry)
	bitSpent                     // spent since its last request left: the Core notes when (spent)
)

func (k *KeyLease) is(bit uint32) bool { return k.bits.Load()&bit != 0 }

// raise sets bit and reports whether it was clear.
func (k *KeyLease) raise(bit uint32) bool { return k.bits.Or(bit)&bit == 0 }

// lower clears bit and reports whether it was set.
func (k *KeyLease) lower(bit uint32) bool { return k.bits.And(^bit)&bit != 0 }

// Take spends n leased tokens if the key holds them. It returns the tokens
// left and whether it took them. left < 0 means the key left its table:
// look it up again.
func (k *KeyLease) Take(n int64) (left int64, ok bool) {
	for {
		v := k.tokens.Load()
		if v < n {
			if k.is(bitAsleep) { // a sleeping share earns again (sleep.go)
				k.WantRefill()
			}
			return v, false
		}
		if k.tokens.CompareAndSwap(v, v-n) {
			if !k.is(bitSpent) && k.raise(bitSpent) {
				k.table.c.inbox.putSpent(k)
			}
			if v-n < k.low.Load() {
				k.WantRefill()
			}
			return v - n, true
		}
	}
}

// Generation changes whenever tokens die with their lease; Give needs the
// value read before the Take it undoes.
func (k *KeyLease) Generation() uint64 { return k.gen.Load() }

// Give puts back n tokens that Take took (a multi-rule check that failed on
// another rule), if their lease has not ended since: gen is Generation as
// read before that Take. It reports whether it put them back.
func (k *KeyLease) Give(n int64, gen uint64) bool {
	for {
		v := k.tokens.Load()
		if v < 0 || k.gen.Load() != gen {
			return false // gone, or the tokens' lease is over
		}
		if k.tokens.CompareAndSwap(v, v+n) {
			return true
		}
	}
}

// WantRefill asks the Core for a lease unless one is already on its way.
// It never blocks (a short lock on the Core's inbox).
func (k *KeyLease) WantRefill() {
	if k.is(bitAsleep) {
		if k.lower(bitAsleep) {
			k.table.c.inbox.put(k) // wakes its share (sleep.go)
		}
		return
	}
	if k.is(bitQueued) || !k.raise(bitQueued) {
		return
	}
	k.table.c.inbox.put(k)
}

// Refused records demand the key could not serve, for the rate estimate,
// and asks for a refill: at once, if its request waits for a share's
// renewal (Core.hurry).
func (k *KeyLease) Refused(n int64) {
	k.demand.Add(n)
	if k.is(bitQueued) && !k.is(bitAsleep) {
		if k.raise(bitHurry) {
			k.table.c.inbox.put(k)
		}
		return
	}
	k.WantRefill()
}

// TakeUpTo spends up to n leased tokens, as many as the key holds, and
// returns how many it took; -1 means the key left its table: look it up
// again. It is Take for a caller that lends what it takes on (a regional
// allocator lending its nodes from its own lease), which wants a part
// rather than nothing.
func (k *KeyLease) TakeUpTo(n int64) int64 {
	if n <= 0 {
		return 0
	}
	for {
		v := k.tokens.Load()
		if v < 0 {
			return -1
		}
		got := min(v, n)
		if got == 0 {
			if k.is(bitAsleep) { // a sleeping share earns again (sleep.go)
				k.WantRefill()
			}
			return 0
		}
		if k.tokens.CompareAndSwap(v, v-got) {
			if !k.is(bitSpent) && k.raise(bitSpent) {
				k.table.c.inbox.putSpent(k)
			}
			if v-got < k.low.Load() {
				k.WantRefill()
			}
			return got
		}
	}
}
