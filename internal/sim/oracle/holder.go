package oracle

import "time"

// holder is one node's account of one key: what it was lent, what it spent
// on its leases and what it gave back, and whether the store reserves its
// fallback.
//
// Returns: cumulative returns ≤ cumulative granted tokens + share earnable
// − cumulative Lease admissions, + 1 for rounding. Grant i's share earns
// rate_i·max(0, min(sentAt_i + ttl_i, at_{i+1}) − at_i): from its delivery
// until its request's send time + ttl, or until the next grant replaces
// it. The current grant's share counts in full from its delivery on.
type holder struct {
	granted  int64   // tokens granted
	earned   float64 // share earnable by the grants already replaced
	share    bool    // a grant's share is current
	shareAt  time.Duration
	shareEnd time.Duration
	rate     float64
	spent    int64 // Lease admissions
	returned int64

	holds    bool          // granted a lease (tokens or a share) and not released since
	leaseEnd time.Duration // the latest end of such a lease: delivery + ttl
}

// earnable is the share the current grant earns if nothing replaces it
// before until.
func (h *holder) earnable(until time.Duration) float64 {
	if !h.share {
		return 0
	}
	return h.rate * max(0, min(h.shareEnd, until)-h.shareAt).Seconds()
}

// grant records a lease answer delivered at at for a request sent at
// sentAt. Every answer replaces the share before it; one that lends tokens
// or a share makes the node a holder.
func (h *holder) grant(at, sentAt time.Duration, tokens int64, rate float64, ttl time.Duration) {
	h.earned += h.earnable(at)
	h.granted += tokens
	h.share, h.shareAt, h.shareEnd, h.rate = true, at, sentAt+ttl, rate
	if tokens > 0 || rate > 0 {
		if !h.holds {
			h.leaseEnd = at + ttl
		}
		h.holds, h.leaseEnd = true, max(h.leaseEnd, at+ttl)
	}
}

// release records that the node gave the key up: it is no longer a
// holder. Its share's account runs on until the next grant.
func (h *holder) release() { h.holds = false }

// held is what the node may hold unspent, before the tolerance.
func (h *holder) held() float64 {
	return float64(h.granted) + h.earned + h.earnable(forever) - float64(h.spent)
}

// reserved says whether a fallback admission at at falls in the store's
// reservation for this node (docs/bounds.md, rule 4): it held a lease that
// ended within absence before at, and has not released the key since.
func (h *holder) reserved(at, absence time.Duration) bool {
	return h.holds && h.leaseEnd >= at-absence
}
