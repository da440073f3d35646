package lease

import "time"

// How long a key's leased tokens still live, for a caller that lends them
// on: what it lends must die no later than the tokens it came from
// (docs/bounds.md, rule 2, and "Regions"). Spends are charged to the
// oldest tokens (spans.go), so the earliest end of the key's spans bounds
// every token it holds. Those ends are already a sweep early, where the
// Core takes the tokens out (grant.go), and no later than the request's
// send time plus its TTL, the earliest instant the lease may end at the
// store.

// syncLive publishes the earliest end of the key's spans, after the Core
// changed them; 0: no lease holds tokens.
func (k *KeyLease) syncLive() {
	at, ok := k.spans.next()
	if !ok {
		at = 0
	}
	k.liveUntil.Store(int64(at))
}

// LiveFor is how long from now (the node's monotonic clock, as Decide
// takes it) every token the key holds still lives: 0 when it holds no
// lease, has left its table, or its oldest lease has ended and the Core
// has not yet taken its tokens out.
func (k *KeyLease) LiveFor(now time.Duration) time.Duration {
	at := k.liveUntil.Load()
	if at == 0 || k.tokens.Load() < 0 {
		return 0
	}
	return max(mono(at).Sub(monoAt(now)), 0)
}
