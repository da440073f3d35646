package envoy

// quotaExhausted reports whether a request's quota_mode limits refuse it:
// each quota limit alone only admits and reports (its status says
// OVER_LIMIT, the request passes), as envoyproxy/ratelimit's quota mode
// does so that Envoy can route to a backend with quota left; once every
// quota limit the request matched is exceeded there is nowhere left to
// go, and the request is refused, as envoyproxy/ratelimit refuses it.
func quotaExhausted(checks []check) bool {
	quotas := 0
	for i := range checks {
		c := &checks[i]
		if c.limit == nil || c.limit.Unlimited || !c.limit.Quota || c.replaced {
			continue
		}
		if !c.over {
			return false
		}
		quotas++
	}
	return quotas > 0
}
