package lease

// phase is where a key's lease stands. The Core moves a key between phases
// only in the transitions named here; each takes the event and the instant
// and does no I/O.
//
//	New ──grant──▶ Leased ◀──────grant──────┐
//	 │               │ ▲                     │
//	 │            share│ │share ends          │
//	 │               ▼ │                     │
//	 │             Sharing ──quiet──▶ GivingBack ──grant──▶ Leased
//	 │               │ ▲
//	 │            idle│ │touched
//	 │               ▼ │
//	 │             Dormant
//	 │
//	 └──(a decision while the allocator is down)──▶ Fallback ──grant──▶ Leased
//
// Leased, Sharing and Dormant keys whose lease ends while the allocator is
// down go to Fallback at the first decision that finds them so. Any phase
// goes to Left when the key leaves its table (idle, or its rule gone).
type phase uint8

const (
	// phaseNew: no answer yet. While the allocator answers, a decision on
	// the key waits for its first lease (docs/bounds.md, rule 1).
	phaseNew phase = iota
	// phaseLeased: the allocator serves the key with tokens. An empty key
	// refuses and asks for more; it never falls back while the allocator
	// answers.
	phaseLeased
	// phaseSharing: served, and earning a share of the rule's rate, in the
	// Core's sweep.
	phaseSharing
	// phaseDormant: sharing, but asleep out of the sweep (sleep.go) until
	// the hot path touches it or a deadline of its comes.
	phaseDormant
	// phaseGivingBack: sharing, with a renewal on its way that asks for no
	// rate: the key went quiet and its other holders may have the share.
	phaseGivingBack
	// phaseFallback: the allocator could not be reached when the key
	// needed it, and no lease is in force: its fallback allowance decides.
	phaseFallback
	// phaseLeft: out of its table; Take fails and callers look again.
	phaseLeft
)

var phaseNames = [...]string{"new", "leased", "sharing", "dormant", "giving back", "fallback", "left"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "phase?"
}

// sharing reports whether the key holds a share of the rule's rate.
func (p phase) sharing() bool { return p == phaseSharing || p == phaseDormant || p == phaseGivingBack }
