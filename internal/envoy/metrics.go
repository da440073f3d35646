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

// RulesLoaded puts at zero every series that set's envoy section can make:
// a counter born at its first event hides that event from rate() and
// increase(), so an alert on it would miss the first refusal. The
// allocator calls it at start and after each reload; the series of
// domains and limits a reload removed stay, at their last value.
func (s *Service) RulesLoaded(set *rules.Set) { s.metrics.known(set.Envoy()) }

// known makes the series of env's domains and limits, and those of a
// domain the section lacks ("unknown"), as observe labels them.
func (m *metrics) known(env *rules.Envoy) {
	m.knownDomain("unknown", nil)
	if env == nil {
		return
	}
	for _, name := range env.Domains() {
		dom, _ := env.Domain(name)
		m.knownDomain(name, dom)
	}
}

func (m *metrics) knownDomain(name string, dom *rules.EnvoyDomain) {
	m.requests.WithLabelValues(name, rlspb.RateLimitResponse_OK.String())
	m.requests.WithLabelValues(name, rlspb.RateLimitResponse_OVER_LIMIT.String())
	m.descriptors.WithLabelValues(name, "", "no_limit")
	if dom == nil {
		return
	}
	m.descriptors.WithLabelValues(name, "override", "ok")
	m.descriptors.WithLabelValues(name, "override", "over_limit")
	for _, l := range dom.Limits() {
		switch {
		case l.Unlimited:
			m.descriptors.WithLabelValues(name, l.ID, "unlimited")
		case l.Shadow: // its would-be refusals are counted apart, answered ok
			m.descriptors.WithLabelValues(name, l.ID, "ok")
			m.shadow.WithLabelValues(name, l.ID)
		default:
			m.descriptors.WithLabelValues(name, l.ID, "ok")
			m.descriptors.WithLabelValues(name, l.ID, "over_limit")
		}
		if len(l.Replaces) > 0 {
			m.descriptors.WithLabelValues(name, "", "replaced")
		}
	}
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
