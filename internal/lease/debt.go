package lease

import "time"

// Settled costs: a request admitted on an estimate whose work cost more
// (client.Reservation.Settle). The difference is a spend like Take's, from
// the key's leased tokens while they last; what they cannot pay is the
// key's debt, at most the rule's (rules.Rule.Debt). The debt is paid from
// the next tokens that come in (a grant, its share's earnings), so the key
// admits nothing until it is paid; what is left of it when the key's next
// request leaves goes with it (Request.Settled), and the allocator takes
// it from the key's bucket, where the whole fleet repays it by refill
// before anything more is lent. The hot path (Take) never looks at it: a
// key in debt holds no tokens.

// Charge takes n more tokens, at now (the node's monotonic clock), for a
// request v admitted, and returns what it could not count: beyond the
// rule's debt, or everything when the key has left its table (gone: charge
// the key's new lease instead).
func (k *KeyLease) Charge(v Verdict, n int64, now time.Duration) (dropped int64, gone bool) {
	if n <= 0 || !v.Allowed {
		return 0, false
	}
	r := k.Rule()
	if v.allowance != nil {
		if got, ok := v.allowance.Charge(r, now, n); ok {
			k.demand.Add(got)
			return n - got, false
		}
		// Closed: the key is served again, and its lease pays.
	}
	// A window's tokens past their window (which the Core has not taken
	// out yet) were counted there: the cost, settled now, is this window's.
	dead := false
	if sb := k.win.spendBy.Load(); sb != 0 && !monoAt(now).Before(mono(sb)) {
		dead = true
	}
	for {
		t := k.tokens.Load()
		if t < 0 {
			return n, true
		}
		got := min(t, n)
		if dead {
			got = 0
		}
		if k.tokens.CompareAndSwap(t, t-got) {
			n -= got
			if t-got < k.low.Load() {
				k.WantRefill()
			}
			break
		}
	}
	if n == 0 {
		return 0, false
	}
	for {
		d := k.debt.Load()
		owed := min(n, max(r.Debt()-d, 0))
		if k.debt.CompareAndSwap(d, d+owed) {
			dropped = n - owed
			break
		}
	}
	k.demand.Add(n) // (the rate estimate counts what the lease did not serve)
	k.WantRefill()  // the debt travels with the next request
	return dropped, false
}

// Debt is what the key owes and has not yet paid or reported.
func (k *KeyLease) Debt() int64 { return max(k.debt.Load(), 0) }

// payDebt pays the key's debt from its tokens, for the Core, as they come
// in: a spend, which the spans charge to the oldest tokens as they do
// Take's.
func (k *KeyLease) payDebt() {
	for {
		d := k.debt.Load()
		t := k.tokens.Load()
		pay := min(d, max(t, 0))
		if pay <= 0 {
			return
		}
		if k.tokens.CompareAndSwap(t, t-pay) {
			k.debt.Add(-pay)
			return
		}
	}
}
