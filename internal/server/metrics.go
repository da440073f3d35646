package server

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Metrics are the allocator's Prometheus collectors. A nil *Metrics records
// nothing. Labels are rule names, methods and results, never keys.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	store    *prometheus.HistogramVec
	wanted   *prometheus.CounterVec
	granted  *prometheus.CounterVec
	holders  *prometheus.HistogramVec
	checks   *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	newKeys  prometheus.Counter
	live     prometheus.Gauge
}

// NewMetrics registers the allocator's collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_allocator_requests_total", Help: "gRPC calls by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "allot_allocator_request_seconds", Help: "gRPC call latency by method.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}, []string{"method"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "allot_allocator_store_seconds", Help: "Store call latency by operation and result.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}, []string{"op", "result"}),
		wanted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_allocator_lease_wanted_tokens_total", Help: "Tokens nodes asked for, by rule.",
		}, []string{"rule"}),
		granted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_allocator_lease_granted_tokens_total", Help: "Tokens lent to nodes, by rule.",
		}, []string{"rule"}),
		holders: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "allot_allocator_lease_holders", Help: "Holders of the key (the asking node included) at each lease grant, by rule.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}, []string{"rule"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_allocator_check_decisions_total", Help: "Check decisions by rule and result.",
		}, []string{"rule", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_allocator_rule_reloads_total", Help: "Rule file reloads by result.",
		}, []string{"result"}),
		newKeys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_allocator_new_keys_refused_total", Help: "Acquire calls refused because their node added keys faster than --max-new-keys-per-node.",
		}),
		live: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_allocator_live_nodes", Help: "Distinct node ids that called Acquire or Release in the last 30 s (the count answers carry as nodes).",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.store, m.wanted, m.granted, m.holders, m.checks, m.reloads, m.newKeys, m.live)
	return m
}

func (m *Metrics) refusedNewKeys() {
	if m != nil {
		m.newKeys.Inc()
	}
}

func (m *Metrics) observeLive(n int) {
	if m != nil {
		m.live.Set(float64(n))
	}
}

// UnaryInterceptor counts and times every call.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		if m != nil {
			method := path.Base(info.FullMethod)
			m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
			m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
		}
		return resp, err
	}
}

// ObserveStore records a store call that began at start: the Envoy rate
// limit service's calls share the histogram with the allocator's own.
func (m *Metrics) ObserveStore(op string, start time.Time, err error) { m.observeStore(op, start, err) }

func (m *Metrics) observeStore(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.store.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}

func (m *Metrics) observeLease(rule string, want, granted int64, holders int) {
	if m == nil {
		return
	}
	m.wanted.WithLabelValues(rule).Add(float64(want))
	m.granted.WithLabelValues(rule).Add(float64(granted))
	m.holders.WithLabelValues(rule).Observe(float64(holders))
}

func (m *Metrics) observeCheck(rule string, allowed bool) {
	if m == nil {
		return
	}
	result := "allowed"
	if !allowed {
		result = "denied"
	}
	m.checks.WithLabelValues(rule, result).Inc()
}

// ObserveReload counts a rules reload.
func (m *Metrics) ObserveReload(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(result).Inc()
}
