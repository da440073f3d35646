// Package grant defines what the allocator lends a node on one (rule, key):
// the one message that the store answers, the allocator's service sends
// as allotv1.Lease, and a node's lease bookkeeping takes. It imports
// nothing of Allot, so that the store's side and the SDK's (which must not
// import the store, nor go-redis with it) both use this one definition;
// each end converts it to and from the wire only at its gRPC edge.
package grant

import "time"

// Grant is a lease lent on one key: store.Lease on the allocator's side,
// lease.Grant on the node's.
type Grant struct {
	Granted    int64
	Remaining  int64         // whole tokens left centrally after the grant
	TTL        time.Duration // how long the node may use the tokens
	RetryAfter time.Duration // when Granted is short of the want: when asking again may pay
	Holders    int           // holders of the key, absent ones and the caller included
	Epoch      int64         // window index for window rules, 0 otherwise
	// Rate is the share of the rule's refill rate lent to the node, in
	// tokens per second, from the answer until the request's send time
	// plus TTL; the central bucket does not earn it meanwhile.
	Rate float64
	// FullFor and FullInTTL (token buckets): the central bucket had been
	// full for FullFor when the request arrived, and for FullInTTL at least,
	// in all, of the TTL before; both 0 when nothing is known. See
	// allotv1.Lease. The allocator reports them; a node reads neither.
	FullFor, FullInTTL time.Duration
	// FallbackNodes is what the node's fallback divides the rule by for
	// the key, at least: Holders, or more so that the fallback allowances
	// told to the key's holders never sum above the rule; 0 from an
	// allocator that does not say.
	FallbackNodes int64
	// SlotShare (concurrency rules) is the node's fair share of the slots
	// by its holders' wants; Granted is then the slots it holds in all.
	SlotShare int64
}
