package envoy

import (
	"fmt"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/rules"
)

// metrics are the service's Prometheus collectors. Labels are configured
// domains and rule names, never descriptor values: a domain the config
// does not know is "unknown", and a request's own limit override is rule
// "override".
type metrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	shadow      *prometheus.CounterVec
	partial     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_envoy_requests_total", Help: "ShouldRateLimit answers by domain and overall code (OK, OVER_LIMIT).",
		}, []string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_envoy_descriptors_total",
			Help: "Descriptor answers by domain, rule and result: ok, over_limit, unlimited, no_limit (nothing matched) or replaced.",
		}, []string{"domain", "rule", "result"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_envoy_shadow_over_limit_total",
			Help: "Would-be refusals of limits in shadow_mode, answered OK, by domain and rule.",
		}, []string{"domain", "rule"}),
		partial: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_envoy_partial_charges_total",
			Help: "Requests refused in the spend phase after other limits were charged: a concurrent request took what the check had seen.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.descriptors, m.shadow, m.partial} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("envoy: metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts one answered request.
func (m *metrics) observe(dom *rules.EnvoyDomain, checks []check, code rlspb.RateLimitResponse_Code) {
	domain := "unknown"
	if dom != nil {
		domain = dom.Name
	}
	m.requests.WithLabelValues(domain, code.String()).Inc()
	for i := range checks {
		c := &checks[i]
		rule, result := "", "no_limit"
		switch l := c.limit; {
		case c.replaced:
			result = "replaced"
		case l == nil:
		case l.Unlimited:
			rule, result = l.ID, "unlimited"
		default:
			rule, result = l.ID, "ok"
			if c.override {
				rule = "override"
			}
			if c.over && l.Shadow {
				m.shadow.WithLabelValues(domain, rule).Inc()
			} else if c.over {
				result = "over_limit"
			}
		}
		m.descriptors.WithLabelValues(domain, rule, result).Inc()
	}
}
