package rules

// envoyproxy/ratelimit config fields that the envoy section knows by name
// but does not implement. A config moved from envoyproxy/ratelimit that
// uses one is refused at load, naming the field and why, rather than
// loaded with the field silently ignored (a limit that quietly counts or
// answers differently from what its file says is worse than a clear
// error). docs/envoy.md, "Not supported, and why", gives the same reasons.
var envoyUnsupported = map[string]string{
	"value_to_metric": "not supported: Allot's metrics label domains and rules, never " +
		"descriptor values, so that clients' values cannot grow the metrics without bound",
	"metadata": "not supported: a descriptor's metadata goes into a response's " +
		"dynamic_metadata, which Allot's answers never set",
}
