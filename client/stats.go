package client

// Keys counts the keys this node holds state for, over every leasable rule:
// what its memory follows. Keys leave when they go idle.
func (c *Client) Keys() int {
	n := 0
	for _, rs := range c.rules.Load().byName {
		if rs.table != nil {
			n += rs.table.Len()
		}
	}
	return n
}
