// Package lease keeps a node's leases: one KeyLease per (rule, key), filled
// ahead of need by batched Acquire calls, earning its share of the rule's
// rate, ended at its TTL and given back when the key goes idle; and, when
// the allocator cannot be reached, the key's fallback allowance.
//
// A KeyLease is a state machine (phase.go): its transitions take the event
// and the instant, change the key's state and say what the Core should do
// next, and do no I/O and read no clock. The Core (core.go) keeps every key
// of a node, its batches and its deadlines, also without goroutines or
// clocks, so that the fleet simulator (internal/sim) runs it as it is. The
// Manager (manager.go) is the Core in a goroutine, with timers and RPCs.
//
// docs/bounds.md says what the fleet may admit and why these rules hold it
// there.
package lease
