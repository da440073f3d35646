package client

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/lease"
)

// metrics are the client's Prometheus collectors. Labels are rule names,
// results and modes, never keys.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	decisions  *prometheus.CounterVec
	requests   *prometheus.CounterVec
	wanted     prometheus.Counter
	granted    prometheus.Counter
	released   prometheus.Counter
	reachable  prometheus.Gauge
	rpcSeconds *prometheus.HistogramVec
	roundTrip  *prometheus.GaugeVec
	ejected    *prometheus.GaugeVec
	ejections  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_client_decisions_total",
			Help: "Decisions by rule, result (allowed, denied, or shadow_denied: a shadow rule would have refused and let it through) and mode. Lease-mode admissions are counted in tokens, summed each sweep, so the hot path keeps no counter.",
		}, []string{"rule", "result", "mode"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_client_lease_requests_total", Help: "Acquire calls by result.",
		}, []string{"result"}),
		wanted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_client_lease_wanted_tokens_total", Help: "Tokens asked for in Acquire calls.",
		}),
		granted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_client_lease_granted_tokens_total", Help: "Tokens the allocator lent.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_client_lease_released_tokens_total", Help: "Unused tokens given back.",
		}),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_client_allocator_reachable", Help: "1 while an allocator answers, 0 while the node is in fallback (every allocator failed).",
		}),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "allot_client_rpc_seconds", Help: "Allocator call latency by method.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}, []string{"method"}),
	}
	m.roundTrip = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "allot_client_allocator_round_trip_seconds",
		Help: "Average Acquire round trip to each allocator; lease renewals leave early enough for the slowest.",
	}, []string{"allocator"})
	m.ejected = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "allot_client_allocator_ejected",
		Help: "1 while the allocator is ejected: it failed a call, and calls go to the other allocators until it answers a health probe.",
	}, []string{"allocator"})
	m.ejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_client_allocator_ejections_total", Help: "Times the allocator was ejected.",
	}, []string{"allocator"})
	m.reachable.Set(1)
	m.collectors = []prometheus.Collector{m.decisions, m.requests, m.wanted, m.granted, m.released, m.reachable, m.rpcSeconds,
		m.roundTrip, m.ejected, m.ejections}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("client: Config.Registerer: %w (use one registerer per Client)", err)
		}
	}
	return m, nil
}

// keyCounter is a manager of keys under Lease.MaxKeys: the lease pools'
// and the slots'.
type keyCounter interface {
	Keys() int
	OverCap() int64
}

// watchKeys exports how many keys the node holds, leased and of slots, and
// how often a new key found Lease.MaxKeys held.
func (m *metrics) watchKeys(leases, slots keyCounter) error {
	keys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "allot_client_keys", Help: "Keys the node keeps state for (lease pools), over all rules; capped at Lease.MaxKeys.",
	}, func() float64 { return float64(leases.Keys()) })
	over := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "allot_client_keys_over_cap_total", Help: "Requests on a new key that found the key table full: decided by the allocator (Check) instead.",
	}, func() float64 { return float64(leases.OverCap()) })
	slotKeys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "allot_client_slot_keys", Help: "Keys of concurrency rules the node holds slots of, over all rules; capped at Lease.MaxKeys.",
	}, func() float64 { return float64(slots.Keys()) })
	slotOver := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "allot_client_slot_keys_over_cap_total", Help: "TakeSlot calls on a new key that found the slot keys at Lease.MaxKeys: refused (ErrNoSlot).",
	}, func() float64 { return float64(slots.OverCap()) })
	for _, col := range []prometheus.Collector{keys, over, slotKeys, slotOver} {
		if m.reg != nil {
			if err := m.reg.Register(col); err != nil {
				return fmt.Errorf("client: Config.Registerer: %w", err)
			}
		}
		m.collectors = append(m.collectors, col)
	}
	return nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// ruleCounters are one rule's decision counters, resolved once so that a
// decision does not look labels up.
type ruleCounters struct {
	allowed, denied [ModeStrict + 1]prometheus.Counter
}

// rule resolves the counters of a rule. A shadow rule's refusals are let
// through, and counted as result "shadow_denied".
func (m *metrics) rule(name string, shadow bool) *ruleCounters {
	rc := &ruleCounters{}
	denied := "denied"
	if shadow {
		denied = "shadow_denied"
	}
	for _, mode := range []Mode{ModeLease, ModeFallback, ModeStrict} {
		rc.allowed[mode] = m.decisions.WithLabelValues(name, "allowed", mode.String())
		rc.denied[mode] = m.decisions.WithLabelValues(name, denied, mode.String())
	}
	return rc
}

// decide counts a decision of mode that allowed says.
func (rc *ruleCounters) decide(allowed bool, mode Mode) {
	if allowed {
		rc.allowed[mode].Inc()
	} else {
		rc.refused(mode)
	}
}

// refused counts a refusal of mode.
func (rc *ruleCounters) refused(mode Mode) { rc.denied[mode].Inc() }

// rpc times one call; call the returned func with its error.
func (m *metrics) rpc(method string) func(error) {
	start := time.Now()
	return func(error) {
		m.rpcSeconds.WithLabelValues(method).Observe(time.Since(start).Seconds())
	}
}

// leaseHooks connect the lease manager to the metrics and the logs.
func (c *Client) leaseHooks() lease.Hooks {
	m := c.metrics
	return lease.Hooks{
		Acquired: func(keys int, wanted, granted int64, took time.Duration, err error) {
			result := "ok"
			if err != nil {
				result = "error"
			}
			m.requests.WithLabelValues(result).Inc()
			m.wanted.Add(float64(wanted))
			m.granted.Add(float64(granted))
		},
		Released: func(keys int, tokens int64, err error) {
			if err == nil {
				m.released.Add(float64(tokens))
			}
		},
		Reachable: func(up bool, cause error) {
			if up {
				c.reportStrictSoon()
				m.reachable.Set(1)
				c.logMode("allot: allocator reachable: deciding from leases again")
				return
			}
			m.reachable.Set(0)
			c.logMode("allot: allocator unreachable: keys without lease tokens use their fallback allowance (limit/N)",
				"nodes", c.fleetSize(), "err", cause)
		},
		RulesVersion: func(v string) {
			if v != c.rules.Load().version {
				c.requestRules()
			}
		},
		Taken: func(rule string, tokens int64) {
			if rs := c.rules.Load().get(rule); rs != nil {
				rs.counts.allowed[ModeLease].Add(float64(tokens))
			}
		},
	}
}
