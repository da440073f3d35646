// Package fallback decides what a node may admit when the allocator cannot
// lend it tokens: the rule's limit divided by the number of live nodes,
// which it counts through memberlist gossip.
package fallback

// Nodes picks the node count N that divides a rule's limit: live gossip
// members with the node role when gossip runs, else the allocator's last
// count of the key's holders, else the configured fleet size, else 1.
func Nodes(gossip, holders, configured int) int {
	switch {
	case gossip > 0:
		return gossip
	case holders > 0:
		return holders
	case configured > 0:
		return configured
	}
	return 1
}
