// Package fallback decides what a node may admit when the allocator cannot
// lend it tokens: the rule's limit divided by the number of live nodes,
// which it counts through memberlist gossip.
package fallback

// Nodes picks the node count N that divides a rule's limit: live gossip
// members with the node role when gossip runs. Without gossip, the largest
// of what the node knows: the allocator's count of the key's holders, the
// most holders it has seen on any key lately (seen), and the configured
// fleet size; at least 1. Erring large keeps a key new to every node (or
// back after an idle eviction) from admitting a burst on each.
func Nodes(gossip, holders, seen, configured int) int {
	if gossip > 0 {
		return gossip
	}
	return max(holders, seen, configured, 1)
}
