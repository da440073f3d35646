package client

import "errors"

// Errors returned by the client. Compare with errors.Is.
var (
	// ErrUnknownRule: the rule is in neither the allocator's rules nor
	// Config.Rules.
	ErrUnknownRule = errors.New("allot: unknown rule")
	// ErrNoRules: New had no rules to decide by: no allocator answered
	// within StartTimeout and Config.Rules is empty.
	ErrNoRules = errors.New("allot: no rules")
	// ErrQueueFull: Wait found MaxWaiters callers already queued on the key.
	ErrQueueFull = errors.New("allot: wait queue full")
	// ErrClosed: the client has been closed.
	ErrClosed = errors.New("allot: client closed")
	// ErrInvalidKey: the key is empty, longer than 512 bytes, or not
	// UTF-8. Hash a key that may be any bytes (httplimit and grpclimit do).
	ErrInvalidKey = errors.New("allot: key must be 1 to 512 bytes of UTF-8")
	// ErrInvalidCost: the cost is not positive.
	ErrInvalidCost = errors.New("allot: cost must be positive")
	// ErrCostAboveCapacity: the cost is larger than the rule's capacity,
	// so the request could never pass.
	ErrCostAboveCapacity = errors.New("allot: cost exceeds the rule's capacity")
	// ErrTwoStrict: AllowAll was given more than one strict rule; a strict
	// rule is spent at the allocator and cannot be given back if a later
	// one refuses.
	ErrTwoStrict = errors.New("allot: AllowAll takes at most one strict rule")
	// ErrReservationDone: Settle was called on a reservation already
	// settled or cancelled; the message says which.
	ErrReservationDone = errors.New("allot: reservation already done")
	// ErrDebtAboveMax: Settle could not count all of a cost above the
	// estimate, as the key's debt would have passed the rule's max_debt;
	// the message says how much went uncounted.
	ErrDebtAboveMax = errors.New("allot: settled cost above the rule's max_debt")
)
