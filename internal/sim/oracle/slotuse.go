package oracle

import (
	"fmt"
	"time"
)

// A concurrency key's throughput, and its slots by node for a violation.

// SlotUse is one concurrency key's throughput: the slot-time used over the
// limit's, from the key's first take to the end.
type SlotUse struct {
	Rule, Key string
	Limit     int64
	Busy      float64 // slot-seconds used
	Ratio     float64 // Busy / (Limit · span)
}

// slotUse reports every slot key's throughput up to end.
func (o *Oracle) slotUse(end time.Duration) []SlotUse {
	var out []SlotUse
	for _, sk := range o.slots.keys {
		sk.account(max(end, sk.last))
		span := (end - sk.first).Seconds()
		l := sk.rs.cur().Limit
		u := SlotUse{Rule: sk.id.rule, Key: sk.id.key, Limit: l, Busy: sk.busy / 1e9}
		if span > 0 {
			u.Ratio = u.Busy / (float64(l) * span)
		}
		out = append(out, u)
	}
	return out
}

// byNode is the nodes' slots in flight, for a violation's detail.
func (sk *slotKey) byNode() string {
	out := ""
	for i := range len(sk.nodes) + 64 {
		if s := sk.nodes[i]; s != nil && s.lease+s.fallback > 0 {
			out += fmt.Sprintf(" %d:%d/%d/%d", i, s.lease, s.fallback, s.excused)
		}
	}
	return out
}
