package middleware

import (
	"context"

	"github.com/allot-dev/allot/client"
)

// SplitSlots parts policies into those on rate rules and those on
// concurrency rules (a slot held for the handler's life), by the rule each
// names (rule), and returns the rate policies' rule names too.
func SplitSlots[P any](c *client.Client, policies []P, rule func(P) string) (rate, slots []P, names []string) {
	for _, p := range policies {
		if r, ok := c.Rule(rule(p)); ok && r.Algorithm == "concurrency" {
			slots = append(slots, p)
			continue
		}
		rate = append(rate, p)
		names = append(names, rule(p))
	}
	return rate, slots, names
}

// TakeSlots takes a slot of each policy's rule, for the key key(p) says,
// in order. When one is not taken it gives back those taken before it and
// returns the policy's index and the error, which the caller answers in
// its protocol's terms (a *client.SlotError: no slot free).
func TakeSlots[P any](ctx context.Context, c *client.Client, policies []P, rule, key func(P) string) (held []*client.Slot, failed int, err error) {
	if len(policies) == 0 {
		return nil, -1, nil
	}
	held = make([]*client.Slot, 0, len(policies))
	for i, p := range policies {
		s, err := c.TakeSlot(ctx, rule(p), key(p))
		if err != nil {
			ReleaseSlots(held)
			return nil, i, err
		}
		held = append(held, s)
	}
	return held, -1, nil
}

// ReleaseSlots gives back every slot of held.
func ReleaseSlots(held []*client.Slot) {
	for _, s := range held {
		s.Release()
	}
}
