// Package fallback decides what a node may admit when the allocator cannot
// lend it tokens: the rule's limit divided by the number of live nodes,
// which it counts through memberlist gossip.
package fallback

// Nodes picks the node count N that divides a rule's limit: the largest of
// what the node knows: live gossip members with the node role, the
// allocator's count of the key's holders, the most holders (or live nodes)
// it has seen lately (seen), and the configured fleet size; at least 1.
// Erring large keeps each node within its part: a node cut off from the
// gossip pool as well as from the allocator sees itself alone in gossip,
// but the allocator still keeps its part for it by the holders it told it
// (docs/bounds.md, rule 4).
func Nodes(gossip, holders, seen, configured int) int {
	return max(gossip, holders, seen, configured, 1)
}
