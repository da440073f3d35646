package rules

// envoyproxy/ratelimit config fields that the envoy section knows by name
// but does not implement. A config moved from envoyproxy/ratelimit that
// uses one is refused at load, naming the field and why, rather than
// loaded with the field silently ignored (a limit that quietly counts or
// answers differently from what its file says is worse than a clear
// error). The README's "Not supported, and why" gives the same reasons.
var envoyUnsupported = map[string]string{
	"quota_mode": "not supported: envoyproxy/ratelimit's quota mode answers an exceeded " +
		"limit OK with the descriptor OVER_LIMIT, names the violations in dynamic_metadata " +
		"for quota-aware routing, and refuses once every quota limit is exceeded; Allot " +
		"sets no dynamic_metadata. For a soft limit that admits and counts, write " +
		"shadow_mode: true",
	"value_to_metric": "not supported: Allot's metrics label domains and rules, never " +
		"descriptor values, so that clients' values cannot grow the metrics without bound",
	"metadata": "not supported: a descriptor's metadata goes into a response's " +
		"dynamic_metadata, which Allot's answers never set",
}
