package server

import (
	"context"
	"path"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/rules"
)

// Metrics are the allocator's Prometheus collectors. A nil *Metrics records
// nothing. Labels are rule names, methods and results, never keys.
//
// Every series whose labels are known before its first event exists from
// start at zero (per method and code, store operation and result, rule and
// result): a counter born at its first event hides that event from rate()
// and increase(), and an alert on it never fires for the first failure.
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
	rules    *rulesInfo
}

// storeOps are the operations timed in allot_allocator_store_seconds: the
// Allocator service's, then the Envoy service's (internal/envoy).
var storeOps = []string{"acquire", "release", "check", "envoy_check", "envoy_peek"}

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
		rules: &rulesInfo{desc: prometheus.NewDesc("allot_allocator_rules_info",
			"Always 1; version is the rules' version being served (rules_version in answers and logs), replaced on reload.",
			[]string{"version"}, nil)},
	}
	reg.MustRegister(m.requests, m.latency, m.store, m.wanted, m.granted, m.holders, m.checks, m.reloads, m.newKeys, m.live, m.rules)
	for _, op := range storeOps {
		m.store.WithLabelValues(op, "ok")
		m.store.WithLabelValues(op, "error")
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	return m
}

// InitServices puts the calls of every unary method of services at zero,
// for every status code: UnaryInterceptor labels a call with its method's
// name alone.
func (m *Metrics) InitServices(services ...*grpc.ServiceDesc) {
	if m == nil {
		return
	}
	for _, svc := range services {
		for _, md := range svc.Methods {
			m.latency.WithLabelValues(md.MethodName)
			for c := codes.OK; c <= codes.Unauthenticated; c++ {
				m.requests.WithLabelValues(md.MethodName, c.String())
			}
		}
	}
}

// rulesLoaded exports set's version and puts its rules' series at zero. A
// reload adds the series of new rules; those of rules it removed stay, at
// their last value, as counters of a past rule do.
func (m *Metrics) rulesLoaded(set *rules.Set) {
	if m == nil {
		return
	}
	v := set.Version()
	m.rules.version.Store(&v)
	for _, r := range set.Rules() {
		m.wanted.WithLabelValues(r.Name)
		m.granted.WithLabelValues(r.Name)
		m.holders.WithLabelValues(r.Name)
		m.checks.WithLabelValues(r.Name, "allowed")
		m.checks.WithLabelValues(r.Name, "denied")
	}
}

// rulesInfo is allot_allocator_rules_info: the version as a label of a
// constant 1, so that a dashboard shows and an alert compares what each
// allocator serves. It is read at each scrape, so a reload replaces the
// series at once, with no scrape seeing both versions or neither.
type rulesInfo struct {
	desc    *prometheus.Desc
	version atomic.Pointer[string]
}

func (r *rulesInfo) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *rulesInfo) Collect(ch chan<- prometheus.Metric) {
	if v := r.version.Load(); v != nil {
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, 1, *v)
	}
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
