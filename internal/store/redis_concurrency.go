package store

// The concurrency rules' calls to lua/concurrency.lua (core_concurrency.go
// is the reference).

// slotCall is a concurrency item's acquire: after the rule, the node, the
// slots it would hold, the slots it keeps (which common.lua's dispatch
// reads where other items have want and consumed), the lease's max and
// the request's seq.
func (s *Redis) slotCall(req *AcquireRequest) scriptCall {
	args := s.ruleArgs(req.Rule).str(req.Node).int(req.Want).int(max(req.SlotsKept, 0)).int(req.Rule.Lease.Max).int(max(req.Seq, 0))
	return scriptCall{scriptFor(req.Rule), "a", s.key(req.Rule, req.Key), args, false}
}

// slotReply reads the script's answer: granted, remaining, ttl (µs),
// holders and share.
func slotReply(v []any) (Lease, error) {
	var ints [5]int64
	if len(v) != len(ints) {
		return Lease{}, badReply("concurrency acquire", v)
	}
	for i := range ints {
		n, ok := v[i].(int64)
		if !ok || n < 0 {
			return Lease{}, badReply("concurrency acquire", v)
		}
		ints[i] = n
	}
	return Lease{Granted: ints[0], Remaining: ints[1], TTL: us(ints[2]), Holders: int(ints[3]),
		FallbackNodes: ints[3], SlotShare: ints[4]}, nil
}
